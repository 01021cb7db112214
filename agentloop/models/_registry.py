"""``"provider:model"`` strings. Each provider prefix names a factory, registered explicitly.

The built-in drivers import their module (and its SDK) on first use only; ``agentloop.testing``
registers ``test:`` when it is imported.
"""

from __future__ import annotations

from collections.abc import Callable

from .._errors import UserError
from ._base import Model

ModelFactory = Callable[[str], Model]


def _openai_chat(name: str) -> Model:
    from .openai import OpenAIChatModel

    return OpenAIChatModel(name)


def _openai_responses(name: str) -> Model:
    from .openai import OpenAIResponsesModel

    return OpenAIResponsesModel(name)


def _anthropic(name: str) -> Model:
    from .anthropic import AnthropicModel

    return AnthropicModel(name)


_PROVIDERS: dict[str, ModelFactory] = {
    "openai": _openai_chat,
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "anthropic": _anthropic,
}


def register_provider(prefix: str, factory: ModelFactory) -> None:
    """Make ``"prefix:name"`` resolve to ``factory(name)`` (a later registration replaces one).

    Args:
        prefix: The provider prefix, before the ``:``.
        factory: Makes a ``Model`` of the model's name (what follows the ``:``).
    """
    if not prefix or ":" in prefix:
        raise UserError(f"a provider prefix is a non-empty name without ':', not {prefix!r}")
    _PROVIDERS[prefix] = factory


def split_model_string(spec: str) -> tuple[str, str]:
    """``"provider:model"`` as its two parts; ``UserError`` for a string of another form. The
    provider need not be registered yet (``resolve_model`` looks it up)."""
    provider, sep, name = spec.partition(":")
    if not sep or not provider or not name:
        raise UserError(
            f"model string {spec!r} is not of the form 'provider:model' (for example "
            f"'openai:gpt-4o-mini'); providers: {', '.join(_PROVIDERS)}"
        )
    return provider, name


def resolve_model(spec: str | Model) -> Model:
    """A ``Model`` for ``"provider:model"`` (for example ``"anthropic:claude-sonnet-4-5"``).

    Args:
        spec: The string, or a ``Model`` (returned as it is).
    """
    if isinstance(spec, Model):
        return spec
    provider, name = split_model_string(spec)
    return _factory(provider, spec)(name)


def check_model_string(spec: str) -> None:
    """``UserError`` unless ``spec`` is ``"provider:model"`` with a registered provider (where
    an agent is made: a typo fails there, not at the first run)."""
    provider, _ = split_model_string(spec)
    _factory(provider, spec)


def _factory(provider: str, spec: str) -> ModelFactory:
    factory = _PROVIDERS.get(provider)
    if factory is None:
        import difflib

        close = difflib.get_close_matches(provider, list(_PROVIDERS), n=1)
        meant = f"; did you mean {close[0]!r}?" if close else ""
        raise UserError(
            f"unknown model provider {provider!r} in {spec!r}{meant} Known: "
            f"{', '.join(_PROVIDERS)} (agentloop.models.register_provider adds one; importing "
            "agentloop.testing adds 'test')"
        )
    return factory
