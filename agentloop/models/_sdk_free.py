"""The URL and headers the OpenAI SDK client would compute, computed without importing the SDK.

The direct aiohttp path (``_transport.DirectSender``) only needs a URL and the headers of each
request. Importing the ``openai`` SDK to learn them took 0.3-0.5 s and about 30 MiB of memory on
the event loop before the first request. This module computes the same values from the same
inputs (the key, ``OPENAI_BASE_URL``, ``OPENAI_ORG_ID``, ``OPENAI_PROJECT_ID`` and the platform),
for the SDK versions in ``_transport.CHECKED`` only; whenever something here is not
reproduced (``OPENAI_CUSTOM_HEADERS``, an unusual base URL) it returns ``None`` and the driver
makes the SDK client as before. ``tests/models/test_sdk_free.py`` compares the result with the
SDK client's own ``base_url``, ``default_headers`` and ``auth_headers``.
"""

from __future__ import annotations

import functools
import os
import platform
import sys
from dataclasses import dataclass
from importlib.metadata import version

from ._transport import internals_checked

__all__ = ["DirectRequest", "openai_direct_request"]

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


@dataclass(frozen=True, slots=True)
class DirectRequest:
    """Where a direct sender posts, and with which headers (credentials included)."""

    base_url: str
    headers: dict[str, str]


def openai_direct_request(key: str, base_url: str | None) -> DirectRequest | None:
    """What ``openai.AsyncOpenAI(api_key=key, base_url=base_url)`` would send, or ``None`` when
    only the SDK client can say."""
    if not internals_checked() or os.environ.get("OPENAI_CUSTOM_HEADERS") is not None:
        return None
    url = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL")
    url = OPENAI_DEFAULT_BASE_URL if url is None else url
    if not url.startswith(("http://", "https://")) or "?" in url or "#" in url:
        return None
    if not url.endswith("/"):
        url += "/"  # the SDK's base URL always ends in a slash
    headers = {
        "Accept": "application/json",
        "Content-Type": "application/json",
        **_stainless_headers("AsyncOpenAI", version("openai")),
        "X-Stainless-Async": "async:asyncio",
    }
    for header, env in (
        ("OpenAI-Organization", "OPENAI_ORG_ID"),
        ("OpenAI-Project", "OPENAI_PROJECT_ID"),
    ):
        value = os.environ.get(env)
        if value is not None:
            headers[header] = value
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return DirectRequest(base_url=url, headers=headers)


@functools.cache
def _stainless_headers(client_class: str, package_version: str) -> dict[str, str]:
    """The SDK's user agent and platform headers (``_base_client.platform_headers``)."""
    return {
        "User-Agent": f"{client_class}/Python {package_version}",
        "X-Stainless-Lang": "python",
        "X-Stainless-Package-Version": package_version,
        "X-Stainless-OS": _platform_name(),
        "X-Stainless-Arch": _architecture(),
        "X-Stainless-Runtime": _guarded(platform.python_implementation),
        "X-Stainless-Runtime-Version": _guarded(platform.python_version),
    }


def _guarded(read: object) -> str:
    try:
        return str(read())  # type: ignore[operator]
    except Exception:
        return "unknown"


def _platform_name() -> str:
    try:
        system = platform.system().lower()
        name = platform.platform().lower()
    except Exception:
        return "Unknown"
    if "iphone" in name or "ipad" in name:
        return "iOS"
    known = {"darwin": "MacOS", "windows": "Windows"}
    if system in known:
        return known[system]
    if "android" in name:
        return "Android"
    if system in ("freebsd", "openbsd"):
        return {"freebsd": "FreeBSD", "openbsd": "OpenBSD"}[system]
    if system == "linux":
        try:
            distro = platform.freedesktop_os_release().get("ID", "").lower()
        except OSError:
            distro = ""
        return {"freebsd": "FreeBSD", "openbsd": "OpenBSD"}.get(distro, "Linux")
    return f"Other:{name}" if name else "Unknown"


def _architecture() -> str:
    try:
        machine = platform.machine().lower()
    except Exception:
        return "unknown"
    if machine in ("arm64", "aarch64"):
        return "arm64"
    if machine == "arm":
        return "arm"
    if machine == "x86_64":
        return "x64"
    if sys.maxsize <= 2**32:
        return "x32"
    return f"other:{machine}" if machine else "unknown"
