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
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.notices import without_sdk_notice

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "agentloop"]
KEYS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
ZYGOTE = Path(__file__).with_name("_zygote.py")
LAUNCHER = [sys.executable, "-S", str(ROOT / "tests" / "support" / "zygote.py")]


@dataclass
class _Forking:
    """The warm ``agentloop`` process ``run`` has fork the command (see ``conftest.py``): its
    socket, and the environment it started with."""

    socket: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)


forking = _Forking()


def _startup(env: Mapping[str, str]) -> dict[str, str]:
    """The variables the interpreter reads as it starts (a fork has started already)."""
    return {
        name: value
        for name, value in env.items()
        if name.startswith(("PYTHON", "LC_")) or name in ("LANG", "LANGUAGE")
    }


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


def _command(env: Mapping[str, str], fresh: bool) -> list[str]:
    """The warm process's launcher when there is one (unless ``fresh``) and the interpreter
    would start the same; else ``python -m agentloop`` from scratch."""
    if forking.socket and not fresh and _startup(env) == _startup(forking.env):
        return [*LAUNCHER, forking.socket]
    return COMMAND


def run(
    args: Sequence[str],
    *,
    input: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    fresh: bool = False,
) -> Done:
    """``agentloop ARGS`` with stdout and stderr as pipes: forked from the warm process when
    there is one (unless ``fresh``) and the interpreter would start the same; else
    ``python -m agentloop`` from scratch."""
    full_env = environment(env)
    proc = subprocess.run(
        [*_command(full_env, fresh), *args],
        input=input,
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=full_env,
        timeout=timeout,
        stdin=None if input is not None else subprocess.DEVNULL,
    )
    return Done(proc.returncode, proc.stdout, without_sdk_notice(proc.stderr))


def run_in_terminal(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    interrupt_after: bytes | None = None,
    size: tuple[int, int] = (40, 110),
    command: Sequence[str] | None = None,
    fresh: bool = False,
) -> Done:
    """``agentloop ARGS`` with stdin and stdout on a pseudo-terminal (stderr a pipe), until it
    exits: forked from the warm process as ``run`` is (unless ``fresh``), else ``command``
    (``python -m agentloop``) from scratch. With ``interrupt_after``, SIGINT (what Ctrl-C
    sends) once that text has been drawn."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    full_env = environment({"TERM": "xterm-256color", **(env or {})})
    chunks: list[bytes] = []
    try:
        with subprocess.Popen(
            [*(command or _command(full_env, fresh)), *args],
            stdin=slave,
            stdout=slave,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=full_env,
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
    return Done(code, b"".join(chunks).decode("utf-8", "replace"), without_sdk_notice(err))


class Terminal:
    """``agentloop ARGS`` on a pseudo-terminal (stdin and stdout; stderr a pipe), driven as a
    person would: wait for text to be drawn, type a line, press Ctrl-C (SIGINT). Forked from
    the warm process as ``run`` is (unless ``fresh``): the launcher hands the terminal over and
    passes Ctrl-C on; ``run_in_terminal`` runs the command to its end in a terminal."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        size: tuple[int, int] = (40, 110),
        fresh: bool = False,
    ) -> None:
        self._master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
        full_env = environment({"TERM": "xterm-256color", **(env or {})})
        try:
            self.proc = subprocess.Popen(
                [*_command(full_env, fresh), *args],
                stdin=slave,
                stdout=slave,
                stderr=subprocess.PIPE,
                cwd=ROOT,
                env=full_env,
            )
        finally:
            os.close(slave)
        self._out = b""
        self._seen = 0  # what expect() has matched so far
        self._closed = False

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        os.close(self._master)

    @property
    def out(self) -> str:
        return self._out.decode("utf-8", "replace")

    def _read(self, wait: float) -> bool:
        """Read what is there (waiting up to ``wait`` s); False once the terminal is closed."""
        if self._closed:
            return False
        ready, _, _ = select.select([self._master], [], [], wait)
        if not ready:
            return True
        try:
            data = os.read(self._master, 65536)
        except OSError:  # EIO: the child closed the terminal
            data = b""
        if not data:
            self._closed = True
            return False
        self._out += data
        return True

    def expect(self, text: str, timeout: float = 30.0) -> None:
        """Wait until ``text`` is drawn after what was expected before."""
        wanted = text.encode()
        deadline = time.monotonic() + timeout
        while (found := self._out.find(wanted, self._seen)) < 0:
            if time.monotonic() > deadline or not self._read(0.05):
                raise AssertionError(f"{text!r} never came; the terminal shows:\n{self.out}")
        self._seen = found + len(wanted)

    def type(self, line: str) -> None:
        os.write(self._master, line.encode() + b"\n")

    def interrupt(self) -> None:
        """Ctrl-C."""
        self.proc.send_signal(signal.SIGINT)

    def wait(self, timeout: float = 30.0) -> Done:
        """Wait for the process to exit; what it drew and wrote to stderr."""
        deadline = time.monotonic() + timeout
        while self._read(0.05):  # until the child closes the terminal (it exited)
            if time.monotonic() > deadline:
                raise AssertionError(f"still running after {timeout}s; it shows:\n{self.out}")
        code = self.proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
        assert self.proc.stderr is not None
        err = self.proc.stderr.read().decode()
        return Done(code, self.out, without_sdk_notice(err))
