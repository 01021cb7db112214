"""``"provider:model"`` strings, resolved lazily so that no provider SDK is imported until used."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from .._errors import UserError
from ._base import Model

# provider prefix -> (module, class name). The module is imported on first use only.
_PROVIDERS: dict[str, tuple[str, str]] = {
    "openai": ("agentloop.models.openai", "OpenAIChatModel"),
    "openai-chat": ("agentloop.models.openai", "OpenAIChatModel"),
    "openai-responses": ("agentloop.models.openai", "OpenAIResponsesModel"),
    "anthropic": ("agentloop.models.anthropic", "AnthropicModel"),
    "test": ("agentloop.testing", "EchoModel"),
}


def known_providers() -> tuple[str, ...]:
    return tuple(_PROVIDERS)


def resolve_model(spec: str | Model) -> Model:
    """A ``Model`` for ``"provider:model"`` (for example ``"anthropic:claude-sonnet-4-5"``)."""
    if isinstance(spec, Model):
        return spec
    provider, sep, name = spec.partition(":")
    if not sep or not name:
        raise UserError(
            f"model string {spec!r} is not of the form 'provider:model'; "
            f"providers: {', '.join(_PROVIDERS)}"
        )
    try:
        module_name, class_name = _PROVIDERS[provider]
    except KeyError:
        raise UserError(
            f"unknown model provider {provider!r} in {spec!r}; known: {', '.join(_PROVIDERS)}"
        ) from None
    factory: Callable[[str], Model] = getattr(importlib.import_module(module_name), class_name)
    return factory(name)
