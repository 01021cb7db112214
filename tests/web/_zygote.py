"""``agentloop serve --temporal`` and ``agentloop worker``, forked from a warm process for the
replica kill tests (run as a script: ``python tests/web/_zygote.py SOCKET``; see
``tests.support.zygote``).

Each of those processes spent most of its start (0.8 s of CPU quiet, seconds under load)
importing the SDKs, uvicorn and agentloop's web and Temporal parts, and the kill tests start
eight. This imports them once, before any Temporal runtime, event loop or thread exists (so
forking is safe), and each child runs ``python -m agentloop ARGS`` as the CLI tests' zygote
does: a process of its own, with its own pid, that the test SIGKILLs. The commands' own
start-up is exercised by ``test_replicas.py``'s process test, which starts them fresh.
"""

from __future__ import annotations

import gc
import sys

import temporalio.client
import temporalio.worker  # noqa: F401
import uvicorn  # noqa: F401

import agentloop.cli._main
import agentloop.cli._worker
import agentloop.durable_web
import agentloop.models.openai
import agentloop.temporal  # noqa: F401
from tests.cli._zygote import become_agentloop
from tests.support.zygote import serve

if __name__ == "__main__":
    gc.collect()
    gc.freeze()  # what was imported: children neither scan it nor copy it by collecting
    serve(sys.argv[1], become_agentloop)
