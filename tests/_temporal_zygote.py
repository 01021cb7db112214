"""Worker processes for the crash tests of durable runs, forked from one warm process (run as
a script: ``python tests/_temporal_zygote.py SOCKET``; see ``tests.support.zygote``).

Each worker process costs over a second of CPU importing Temporal's SDK, agentloop and the
model driver, and the crash tests start five. This imports them once, before any Temporal
runtime or thread exists (forking then is safe), and forks a worker for each launcher: a
process of its own, with its own pid, connection and worker, that the test SIGKILLs as before.
"""

from __future__ import annotations

import gc
import os
import sys
import traceback
from typing import NoReturn

import anyio
import temporalio.client
import temporalio.worker  # noqa: F401

import agentloop.models.openai
import agentloop.temporal  # noqa: F401
from tests._temporal_worker import main
from tests.support.zygote import Request, serve


def _become(request: Request) -> NoReturn:
    """In the forked child: be ``python tests/_temporal_worker.py ARGS``; never return."""
    os.environ.clear()
    os.environ.update(request.env)
    os.chdir(request.cwd)
    sys.argv = list(request.args)
    code = 0
    try:
        target, queue, url, log = request.args[1:5]
        anyio.run(main, target, queue, url, log)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    gc.collect()
    gc.freeze()  # what was imported: children neither scan it nor copy it by collecting
    serve(sys.argv[1], _become)
