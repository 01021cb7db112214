"""``FallbackModel``: models tried in turn when one fails after its retries."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from .._errors import (
    ModelConnectionError,
    ModelError,
    ModelOverloaded,
    ModelRateLimited,
    UserError,
    as_given,
)
from ._base import Model

if TYPE_CHECKING:
    from ._types import ModelDelta, ModelProfile, ModelRequest, ModelStream

DEFAULT_FALLBACK_ON: tuple[type[ModelError], ...] = (
    ModelOverloaded,
    ModelRateLimited,
    ModelConnectionError,
)


class FallbackModel(Model):
    """A model that tries others in turn: when a model's call fails after its retries with an
    error of ``fallback_on``, the next model is asked.

    In a run, the retry layer drives it: each model gets the attempts of the agent's
    ``RetryPolicy`` (no more: the fallback adds no retries of its own, and a model's driver
    never retries), ``RetryPolicy.deadline`` bounds them all, a model that streamed part of a
    reply before failing has that draft withdrawn (``AttemptDiscarded(reason="fallback")``),
    and ``ModelCallStarted.model`` names the model of each attempt. The run's tool mode and
    output handling follow the first model's profile: give it models of one kind. Used on its
    own (``stream``), it falls back when opening a model's stream fails.

    Args:
        models: The models, in the order they are tried (at least two).
        fallback_on: The error classes that move on to the next model (overloaded, rate
            limited and connection failures by default); any other error fails the call.
    """

    provider = "fallback"

    def __init__(
        self,
        *models: Model,
        fallback_on: Sequence[type[ModelError]] = DEFAULT_FALLBACK_ON,
    ) -> None:
        if len(models) < 2:
            raise UserError("FallbackModel needs at least two models")
        for model in models:
            if not isinstance(as_given(model), Model):
                raise UserError(f"FallbackModel takes Model objects, not {model!r}")
        given = [as_given(c) for c in fallback_on]
        if not given or not all(isinstance(c, type) and issubclass(c, ModelError) for c in given):
            raise UserError("fallback_on must name ModelError classes")
        self.models: tuple[Model, ...] = models
        self.fallback_on: tuple[type[ModelError], ...] = tuple(fallback_on)

    @property
    def name(self) -> str:
        return self.models[0].name

    @property
    def profile(self) -> ModelProfile:
        return self.models[0].profile

    def falls_back(self, error: BaseException) -> bool:
        """Whether ``error`` moves the call on to the next model.

        Args:
            error: The error the model's last attempt failed with.
        """
        return isinstance(error, self.fallback_on)

    def stream(self, request: ModelRequest) -> ModelStream:
        return self._stream(request)

    @asynccontextmanager
    async def _stream(
        self, request: ModelRequest
    ) -> AsyncGenerator[AsyncIterator[ModelDelta], None]:
        last = len(self.models) - 1
        for index, model in enumerate(self.models):
            try:
                opened = model.stream(request)
                deltas = await opened.__aenter__()
            except ModelError as exc:
                if index == last or not self.falls_back(exc):
                    raise
                continue
            try:
                yield deltas
            except BaseException as exc:
                if not await opened.__aexit__(type(exc), exc, exc.__traceback__):
                    raise
            else:
                await opened.__aexit__(None, None, None)
            return

    async def aclose(self) -> None:
        """Close each model (an agent closing its model closes them all; each reopens its
        clients when used again)."""
        for model in self.models:
            with anyio.CancelScope(shield=True):
                await model.aclose()

    def __repr__(self) -> str:
        return f"FallbackModel({', '.join(repr(m) for m in self.models)})"
