"""Running the ``agentloop`` command as a user would: in a pipe, or in a pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "agentloop"]
KEYS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


@dataclass(frozen=True)
class Done:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.strip().splitlines()


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment (AGENTLOOP_BLOCK_REMOTE_MODELS=1 included), no keys."""
    env = {k: v for k, v in os.environ.items() if k not in KEYS and k != "AGENTLOOP_MODEL"}
    env["AGENTLOOP_BLOCK_REMOTE_MODELS"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    env.pop("AGENTLOOP_DEBUG", None)
    env.update(extra or {})
    return env


def run(
    args: Sequence[str],
    *,
    input: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> Done:
    """``agentloop ARGS`` with stdout and stderr as pipes."""
    proc = subprocess.run(
        [*COMMAND, *args],
        input=input,
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=environment(env),
        timeout=timeout,
        stdin=None if input is not None else subprocess.DEVNULL,
    )
    return Done(proc.returncode, proc.stdout, proc.stderr)


def run_in_terminal(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    interrupt_after: bytes | None = None,
    size: tuple[int, int] = (40, 110),
    command: Sequence[str] = COMMAND,
) -> Done:
    """``agentloop ARGS`` with stdin and stdout on a pseudo-terminal (stderr a pipe). With
    ``interrupt_after``, SIGINT (what Ctrl-C sends) once that text has been drawn."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    terminal_env = {"TERM": "xterm-256color", **(env or {})}
    chunks: list[bytes] = []
    try:
        with subprocess.Popen(
            [*command, *args],
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=environment(terminal_env),
        ) as proc:
            os.close(slave)
            slave = -1
            deadline = time.monotonic() + timeout
            interrupted = False
            while time.monotonic() < deadline:
                ready, _, _ = select.select([master], [], [], 0.05)
                if ready:
                    try:
                        data = os.read(master, 65536)
                    except OSError:  # EIO: the child closed the terminal
                        break
                    if not data:
                        break
                    chunks.append(data)
                    if (
                        interrupt_after is not None
                        and not interrupted
                        and interrupt_after in b"".join(chunks)
                    ):
                        proc.send_signal(signal.SIGINT)
                        interrupted = True
                elif proc.poll() is not None:
                    break
            else:
                proc.kill()
            assert proc.stderr is not None
            err = proc.stderr.read().decode()
            code = proc.wait(timeout=5)
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    return Done(code, b"".join(chunks).decode("utf-8", "replace"), err)
