"""OpenAI drivers: Chat Completions (``"openai:<model>"``) and Responses
(``"openai-responses:<model>"``), on the official ``openai`` SDK.

The SDK is imported on first use, except on the direct aiohttp path (asyncio with aiohttp, a
static key), which computes the URL and headers the SDK would (``_sdk_free``) and never imports
it: 0.3-0.5 s and about 20 MiB less before a process's first request. The key comes from
``api_key=`` or ``OPENAI_API_KEY``, the base URL from ``base_url=``, ``OPENAI_BASE_URL`` or the
SDK's default. With a base URL of one's own, by either (vLLM, Ollama, llama.cpp and other
OpenAI-compatible servers), a missing key is allowed: those servers usually want none. Chat
Completions sends ``max_completion_tokens`` to OpenAI and ``max_tokens`` to such a server
(``legacy_max_tokens`` overrides that).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from agentloop._errors import UserError

from ._driver import SDKModel, Transport
from ._openai_chat import ChatDecoder, build_chat_body
from ._openai_responses import ResponsesDecoder, build_responses_body
from ._sdk_free import DirectRequest, openai_direct_request
from ._stream import WireDecoder
from ._types import ModelProfile, ModelRequest, ModelSettings

__all__ = ["OpenAIChatModel", "OpenAIResponsesModel"]

KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
_PLACEHOLDER_KEY = "agentloop-no-key"


class _OpenAIModel(SDKModel):
    _request_id_header: ClassVar[str] = "x-request-id"

    def _key(self) -> str:
        key = self._resolved_key(KEY_ENV)
        if key is None:
            if self._base_url is None and not os.environ.get(BASE_URL_ENV):
                raise UserError(
                    f"no OpenAI API key: set the {KEY_ENV} environment variable "
                    f"or pass api_key=... to the model (a server of your own, given by "
                    f"base_url=... or {BASE_URL_ENV}, needs none)"
                )
            key = _PLACEHOLDER_KEY
        return key

    def _sdk_free_request(self) -> DirectRequest | None:
        return openai_direct_request(self._key(), self._base_url)

    def _make_client(self, http_client: Any) -> Any:
        import openai

        key = self._key()
        return openai.AsyncOpenAI(
            api_key=key,
            base_url=self._base_url,
            max_retries=0,
            http_client=http_client,
            **self._client_options(),
        )

    def _aiohttp_client(self, options: dict[str, Any]) -> Any:
        import openai

        return openai.DefaultAioHttpClient(**options)

    def _httpx_client(self, options: dict[str, Any]) -> Any:
        import openai

        return openai.DefaultAsyncHttpxClient(**options)


class OpenAIChatModel(_OpenAIModel):
    """OpenAI Chat Completions (and OpenAI-compatible servers)."""

    provider: ClassVar[str] = "openai"
    _endpoint: ClassVar[str] = "/chat/completions"

    def __init__(
        self,
        model_name: str,
        *,
        client: Any = None,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: ModelSettings | None = None,
        stream: bool = True,
        transport: Transport = "auto",
        max_connections: int | None = None,
        timeout: Any = None,
        legacy_max_tokens: bool | None = None,
    ) -> None:
        super().__init__(
            model_name,
            client=client,
            base_url=base_url,
            api_key=api_key,
            settings=settings,
            stream=stream,
            transport=transport,
            max_connections=max_connections,
            timeout=timeout,
        )
        own_server = base_url is not None or bool(os.environ.get(BASE_URL_ENV))
        legacy = own_server if legacy_max_tokens is None else legacy_max_tokens
        self._max_tokens_key = "max_tokens" if legacy else "max_completion_tokens"

    @property
    def profile(self) -> ModelProfile:
        return ModelProfile(native_tools=True, stop_sequences=True, native_output=True)

    def _build_body(self, request: ModelRequest, settings: ModelSettings, stream: bool) -> bytes:
        return build_chat_body(
            request,
            settings,
            model=self._model_name,
            stream=stream,
            max_tokens_key=self._max_tokens_key,
            messages=self.message_cache,
            tools=self.tool_cache,
        )

    def _decoder(self) -> WireDecoder:
        return ChatDecoder()


class OpenAIResponsesModel(_OpenAIModel):
    """OpenAI Responses. ``encrypted_reasoning`` asks for reasoning items' encrypted content (for
    stateless replay); by default it is asked for when ``reasoning_effort`` is set."""

    provider: ClassVar[str] = "openai-responses"
    _endpoint: ClassVar[str] = "/responses"

    def __init__(
        self,
        model_name: str,
        *,
        client: Any = None,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: ModelSettings | None = None,
        stream: bool = True,
        transport: Transport = "auto",
        max_connections: int | None = None,
        timeout: Any = None,
        encrypted_reasoning: bool | None = None,
    ) -> None:
        super().__init__(
            model_name,
            client=client,
            base_url=base_url,
            api_key=api_key,
            settings=settings,
            stream=stream,
            transport=transport,
            max_connections=max_connections,
            timeout=timeout,
        )
        self._encrypted_reasoning = encrypted_reasoning

    @property
    def profile(self) -> ModelProfile:
        return ModelProfile(native_tools=True, stop_sequences=False, native_output=True)

    def _build_body(self, request: ModelRequest, settings: ModelSettings, stream: bool) -> bytes:
        return build_responses_body(
            request,
            settings,
            model=self._model_name,
            stream=stream,
            encrypted_reasoning=self._encrypted_reasoning,
            messages=self.message_cache,
            tools=self.tool_cache,
        )

    def _decoder(self) -> WireDecoder:
        return ResponsesDecoder()
