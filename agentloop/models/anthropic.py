"""Anthropic Messages driver (``"anthropic:<model>"``), on the official ``anthropic`` SDK.

The SDK is imported on first use, except on the direct aiohttp path with a static key, which
computes the URL and headers the SDK would (``_sdk_free``; about 4,000 modules less). Credentials come from ``api_key=``, or the SDK's own lookup
(``ANTHROPIC_API_KEY``, ``ANTHROPIC_AUTH_TOKEN``, profiles); the base URL from ``base_url=``,
``ANTHROPIC_BASE_URL`` or the SDK's default. Anthropic has no native JSON output mode, so the
profile says ``native_output=False`` and the runtime teaches the output schema in the prompt.
"""

from __future__ import annotations

from typing import Any, ClassVar

from agentloop._errors import UserError

from ._anthropic_wire import AnthropicDecoder, build_anthropic_body
from ._driver import SDKModel
from ._sdk_free import DirectRequest, anthropic_direct_request
from ._stream import WireDecoder
from ._types import ModelProfile, ModelRequest, ModelSettings

__all__ = ["AnthropicModel"]

KEY_ENV = "ANTHROPIC_API_KEY"


class AnthropicModel(SDKModel):
    """Anthropic Messages API."""

    provider: ClassVar[str] = "anthropic"
    _endpoint: ClassVar[str] = "/v1/messages"
    _request_id_header: ClassVar[str] = "request-id"

    @property
    def profile(self) -> ModelProfile:
        return ModelProfile(native_tools=True, stop_sequences=True, native_output=False)

    def _sdk_free_request(self) -> DirectRequest | None:
        return anthropic_direct_request(self._api_key or None, self._base_url)

    def _make_client(self, http_client: Any) -> Any:
        import anthropic

        try:
            client = anthropic.AsyncAnthropic(
                api_key=self._api_key or None,
                base_url=self._base_url,
                max_retries=0,
                http_client=http_client,
                **self._client_options(),
            )
        except anthropic.CredentialsError as exc:  # a profile that was asked for and is broken
            raise UserError(f"Anthropic credentials: {exc}") from exc
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            raise UserError(
                f"no Anthropic API key: set the {KEY_ENV} environment variable "
                "or pass api_key=... to the model"
            )
        return client

    def _aiohttp_client(self, options: dict[str, Any]) -> Any:
        import anthropic

        return anthropic.DefaultAioHttpClient(**options)

    def _httpx_client(self, options: dict[str, Any]) -> Any:
        import anthropic

        return anthropic.DefaultAsyncHttpxClient(**options)

    def _build_body(self, request: ModelRequest, settings: ModelSettings, stream: bool) -> bytes:
        return build_anthropic_body(
            request,
            settings,
            model=self._model_name,
            stream=stream,
            messages=self.message_cache,
            tools=self.tool_cache,
        )

    def _decoder(self) -> WireDecoder:
        return AnthropicDecoder()
