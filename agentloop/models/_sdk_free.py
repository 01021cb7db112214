"""The URL and headers the OpenAI and Anthropic SDK clients would compute, without importing them.

The direct aiohttp path (``_transport.DirectSender``) only needs a URL and the headers of each
request. Importing the ``openai`` SDK to learn them took 0.3-0.5 s and about 30 MiB of memory on
the event loop before the first request. This module computes the same values from the same
inputs (the key, ``OPENAI_BASE_URL``, ``OPENAI_ORG_ID``, ``OPENAI_PROJECT_ID`` and the platform),
for the SDK versions in ``_transport.CHECKED["openai"]`` only; whenever something here is not
reproduced (``OPENAI_CUSTOM_HEADERS``, an unusual base URL) it returns ``None`` and the driver
makes the SDK client as before. Anthropic's likewise (about 4,000 modules): from a static key
(``api_key=`` or ``ANTHROPIC_API_KEY``), ``ANTHROPIC_BASE_URL`` and the ``anthropic-version`` the
installed SDK sends (read from its ``_constants.py``); an auth token, a profile, federation or
``ANTHROPIC_CUSTOM_HEADERS`` are the SDK's. ``tests/models/test_sdk_free.py`` compares the result
with the SDK client's own ``base_url``, ``default_headers`` and ``auth_headers``.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ._transport import version_checked

__all__ = ["DirectRequest", "anthropic_direct_request", "openai_direct_request", "openai_version"]

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"


@dataclass(frozen=True, slots=True)
class DirectRequest:
    """Where a direct sender posts, and with which headers (credentials included)."""

    base_url: str
    headers: dict[str, str]


def openai_direct_request(key: str, base_url: str | None) -> DirectRequest | None:
    """What ``openai.AsyncOpenAI(api_key=key, base_url=base_url)`` would send, or ``None`` when
    only the SDK client can say."""
    package_version = openai_version()
    if package_version is None or not version_checked("openai", package_version):
        return None
    if os.environ.get("OPENAI_CUSTOM_HEADERS") is not None:
        return None
    stainless = _stainless_headers("AsyncOpenAI", package_version)
    if stainless is None:
        return None
    url = _base_url(base_url, "OPENAI_BASE_URL", OPENAI_DEFAULT_BASE_URL)
    if url is None:
        return None
    headers = {
        "Accept": "application/json",
        "Content-Type": "application/json",
        **stainless,
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


def anthropic_direct_request(api_key: str | None, base_url: str | None) -> DirectRequest | None:
    """What ``anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url)`` would send, or
    ``None`` when only the SDK client can say (no static key: tokens, profiles, federation)."""
    package_version = _sdk_constant("anthropic", "_version.py", "__version__")
    if package_version is None or not version_checked("anthropic", package_version):
        return None
    api_version = _sdk_constant("anthropic", "_constants.py", "ANTHROPIC_API_VERSION")
    if api_version is None or os.environ.get("ANTHROPIC_CUSTOM_HEADERS") is not None:
        return None
    if not api_key:  # the SDK reads the environment only without an explicit credential
        if os.environ.get("ANTHROPIC_AUTH_TOKEN") is not None:
            return None
        api_key = os.environ.get("ANTHROPIC_API_KEY")
        if api_key is None:
            return None
    stainless = _stainless_headers("AsyncAnthropic", package_version)
    url = _base_url(base_url, "ANTHROPIC_BASE_URL", ANTHROPIC_DEFAULT_BASE_URL)
    if stainless is None or url is None:
        return None
    headers = {
        "Accept": "application/json",
        "Content-Type": "application/json",
        **stainless,
        "X-Stainless-Async": "async:asyncio",
        "anthropic-version": api_version,
        "Authorization": f"Bearer {api_key}",
    }
    return DirectRequest(base_url=url, headers=headers)


def _base_url(given: str | None, env: str, default: str) -> str | None:
    """The SDK's base URL (always ending in a slash), or ``None`` for one it might rewrite."""
    url = given if given is not None else os.environ.get(env)
    url = default if url is None else url
    if not url.startswith(("http://", "https://")) or "?" in url or "#" in url:
        return None
    if url.endswith("/") or "/" not in url.partition("://")[2]:
        return url  # a host alone keeps its form: its path is already "/"
    return url + "/"


def openai_version() -> str | None:
    """The installed ``openai`` SDK's version (see ``_sdk_constant``)."""
    return _sdk_constant("openai", "_version.py", "__version__")


@functools.cache
def _sdk_constant(package: str, module_file: str, name: str) -> str | None:
    """A string constant of the installed SDK, read from its source without importing it (the
    distribution metadata costs a scan of ``sys.path``, 5-20 ms; the import, 0.3 s and more);
    ``None`` if not found."""
    spec = importlib.util.find_spec(package)
    for location in (spec and spec.submodule_search_locations) or ():
        try:
            text = (Path(location) / module_file).read_text("utf-8")
        except OSError:
            continue
        found = re.search(rf'^{name}\s*=\s*"([^"]+)"', text, re.MULTILINE)
        if found:
            return found.group(1)
    return None


@functools.cache
def _stainless_headers(client_class: str, package_version: str) -> dict[str, str] | None:
    """The SDK's user agent and platform headers (``_base_client.platform_headers``), or
    ``None`` on a platform this does not name as the SDK does."""
    system = _platform_name()
    if system is None:
        return None
    return {
        "User-Agent": f"{client_class}/Python {package_version}",
        "X-Stainless-Lang": "python",
        "X-Stainless-Package-Version": package_version,
        "X-Stainless-OS": system,
        "X-Stainless-Arch": _architecture(),
        "X-Stainless-Runtime": _guarded(platform.python_implementation),
        "X-Stainless-Runtime-Version": _guarded(platform.python_version),
    }


def _guarded(read: Callable[[], object]) -> str:
    try:
        return str(read())
    except Exception:
        return "unknown"


def _platform_name() -> str | None:
    """The SDK's ``get_platform()`` on the usual systems; it reads ``platform.platform()``
    (50 ms: it scans the interpreter's binary for its libc) only for the words "iphone", "ipad"
    and "android", which come from ``uname`` (the machine, the kernel's release)."""
    try:
        uname = platform.uname()
    except Exception:
        return None
    system = uname.system.lower()
    name = f"{uname.release}-{uname.machine}".lower()
    if "iphone" in name or "ipad" in name:
        return "iOS"
    if system == "darwin":
        return "MacOS"
    if system == "windows":
        return "Windows"
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
    return None  # the SDK says "Other:<platform>": let it


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
