"""The notice a newer SDK release prints once (``UncheckedVersionWarning``), which the tests that
assert a clean stderr accept only where it is due: on versions outside ``CHECKED``, as in CI's
newest-versions stage. On the checked versions stderr must stay exactly as clean as before."""

from __future__ import annotations

import functools
import re
from importlib.metadata import PackageNotFoundError, version

from agentloop.models._transport import CHECKED, release

# ``warnings`` prints "FILE:LINE: UncheckedVersionWarning: MESSAGE", then the source line, indented.
_NOTICE = re.compile(r"^[^\n]*: UncheckedVersionWarning: [^\n]*\n(?:[ \t]+[^\n]*\n)?", re.M)


@functools.cache
def newer_than_checked() -> bool:
    """Whether an installed SDK is newer than its ``CHECKED`` range (so the notice is due)."""
    for dist, (_, high) in CHECKED.items():
        try:
            found = version(dist)
        except PackageNotFoundError:
            continue
        if release(found) >= high:
            return True
    return False


def without_sdk_notice(err: str) -> str:
    """``err`` without the newer-SDK notice, where the installed versions make it due."""
    return _NOTICE.sub("", err) if newer_than_checked() else err
