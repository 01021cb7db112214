"""Every async test runs on asyncio and on trio.

Mark a test ``@pytest.mark.fake_clock`` to run its trio variant on ``trio.testing.MockClock``
(autojump): there it may assert exact times. Its asyncio variant runs in real time, scaled down
by the ``timescale`` fixture, and asserts order only. Fake-clock tests touch no socket and no
thread (autojump would fire while they wait).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Real provider calls fail in this suite unless a test opts in (see agentloop.testing).
os.environ.setdefault("AGENTLOOP_BLOCK_REMOTE_MODELS", "1")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fake_clock: run the trio variant on MockClock(autojump_threshold=0)"
    )


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    if request.param == "trio" and request.node.get_closest_marker("fake_clock"):
        from trio.testing import MockClock

        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return request.param


@pytest.fixture
def fake_time(anyio_backend: Any) -> bool:
    """True where ``anyio.current_time()`` is a fake clock that may be asserted exactly."""
    return isinstance(anyio_backend, tuple)


@pytest.fixture
def timescale(fake_time: bool) -> float:
    """Multiply durations by this: 1.0 on the fake clock, small in real time."""
    return 1.0 if fake_time else 0.02
