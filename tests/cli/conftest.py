"""The ``agentloop`` command for ``_proc.run`` and ``_proc.Terminal``: forked from one warm
process per test session.

Starting ``python -m agentloop`` costs over a second of CPU, nearly all of it importing the
OpenAI and Anthropic SDKs, and these tests start it dozens of times. ``_zygote.py`` imports
them once and forks the command for each run (``tests.support.zygote``): each is still a
process of its own on real pipes (or a pseudo-terminal), with its own environment, arguments
and exit status. The command's own start-up (and exit) is exercised by the tests that ask for a
``fresh`` one (marked ``process`` where it is in a terminal: the fast loop leaves them out).
Without ``fork`` (Windows) every run starts from scratch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.warm import warm_process

from ._proc import ROOT, ZYGOTE, environment, forking

START_TIMEOUT = 30.0


@pytest.fixture(scope="session", autouse=True)
def forked_command(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    if not hasattr(os, "fork"):
        yield
        return
    path = tmp_path_factory.mktemp("cli") / "zygote.sock"
    env = environment()
    with warm_process(
        ZYGOTE, path, env=env, cwd=ROOT, timeout=START_TIMEOUT, what="the agentloop test zygote"
    ):
        forking.socket, forking.env = str(path), env
        try:
            yield
        finally:
            forking.socket = None
