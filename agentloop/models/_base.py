"""The ``Model`` ABC: the one seam a provider driver implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from ._types import ModelProfile, ModelRequest, ModelStream


class Model(ABC):
    """A model driver.

    ``stream(request)`` returns an async context manager that yields an async iterator of
    ``ModelDelta`` values. Leaving the context closes the provider response at once, even in the
    middle of the reply (the runtime does this to cut a ReAct reply, or when the run is
    cancelled). Errors are raised as ``ModelError`` subclasses; the runtime's retry layer decides
    whether to try again, so drivers never retry themselves.
    """

    provider: ClassVar[str] = "custom"

    @property
    @abstractmethod
    def name(self) -> str:
        """The model's name as the provider knows it."""

    @property
    def profile(self) -> ModelProfile:
        return ModelProfile()

    @abstractmethod
    def stream(self, request: ModelRequest) -> ModelStream:
        """Open one streamed reply to ``request``.

        Args:
            request: The model call: messages, tools, settings.
        """

    async def aclose(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Release what the driver holds (its HTTP client, when it created one)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
