"""A fork server for the test suite: a process that imported something heavy once and forks a
ready child for each launcher that connects, instead of each child paying the import again.

``serve(path, become)`` listens on the Unix socket ``path``. A launcher (``launch``) sends its
standard input, output and error, its environment, working folder and arguments; the zygote
forks, and the child calls ``become(request)`` with those streams already its own (it must not
return). The launcher is told the child's pid, then its exit status, and stands in for it: it
passes SIGTERM, SIGINT and SIGHUP on, and exits with the child's status. A launcher that goes
away takes its child with it; the end of the zygote's standard input ends it and every child
still running.

Only the launcher side runs in the launcher's bare interpreter, so this module imports nothing
beyond the standard library.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

_INT = struct.Struct("!i")
_MAX_REQUEST = 1 << 20


@dataclass(frozen=True)
class Request:
    """What a launcher asked for: run with these arguments, environment and working folder."""

    args: list[str]
    env: dict[str, str]
    cwd: str


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            raise EOFError("the other end closed the connection")
        data += more
    return data


def _read_int(conn: socket.socket) -> int:
    return int(_INT.unpack(_read_exactly(conn, _INT.size))[0])


def _receive(conn: socket.socket) -> tuple[Request, list[int]]:
    header, fds, _, _ = socket.recv_fds(conn, _INT.size, 3)
    if len(header) < _INT.size:
        header += _read_exactly(conn, _INT.size - len(header))
    size = int(_INT.unpack(header)[0])
    if not 0 < size <= _MAX_REQUEST:
        raise ValueError(f"a request of {size} bytes")
    fields = json.loads(_read_exactly(conn, size))
    return Request(fields["args"], fields["env"], fields["cwd"]), fds


def serve(path: str, become: Callable[[Request], NoReturn]) -> None:
    """Fork a child for each launcher that connects to ``path``; return when our standard input
    ends (every child still running is killed then)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)
    wake_write.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno())
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # so that SIGCHLD wakes us
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_read, selectors.EVENT_READ, "reap")
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    launchers: dict[int, socket.socket] = {}  # a running child's pid: its launcher

    def drop(pid: int, status: int | None) -> None:
        conn = launchers.pop(pid)
        if conn in (key.fileobj for key in selector.get_map().values()):
            selector.unregister(conn)
        if status is not None:
            try:
                conn.sendall(_INT.pack(os.waitstatus_to_exitcode(status)))
            except OSError:
                pass
        conn.close()

    print("ready", flush=True)
    try:
        while True:
            for key, _ in selector.select():
                if key.data == "accept":
                    conn, _ = listener.accept()
                    try:
                        request, fds = _receive(conn)
                    except (OSError, EOFError, ValueError):
                        conn.close()
                        continue
                    pid = os.fork()
                    if pid == 0:  # the child: it never returns
                        for own in (listener, wake_read, wake_write, conn, *launchers.values()):
                            own.close()
                        selector.close()
                        signal.set_wakeup_fd(-1)
                        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                        for target, fd in enumerate(fds):
                            os.dup2(fd, target)
                            os.close(fd)
                        become(request)
                    for fd in fds:
                        os.close(fd)
                    launchers[pid] = conn
                    selector.register(conn, selectors.EVENT_READ, pid)
                    conn.sendall(_INT.pack(pid))
                elif key.data == "reap":
                    try:
                        while wake_read.recv(4096):  # drain the signal bytes
                            pass
                    except BlockingIOError:
                        pass
                    while launchers:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                        if pid == 0:
                            break
                        if pid in launchers:
                            drop(pid, status)
                elif key.data == "stdin":
                    if not os.read(sys.stdin.fileno(), 4096):
                        return
                elif launchers.get(key.data) is key.fileobj:  # not dropped earlier in this batch
                    # A launcher's connection is readable only once the launcher is gone.
                    selector.unregister(key.fileobj)
                    os.kill(key.data, signal.SIGKILL)  # then reaped (and dropped) as any other
    finally:
        for pid in launchers:
            os.kill(pid, signal.SIGKILL)


def launch(path: str, args: list[str], pid_file: str | None = None) -> int:
    """Have the zygote at ``path`` fork a child on our standard streams, environment and
    working folder; stand in for it until it exits, and return its exit status (negative: the
    signal that ended it). With ``pid_file``, the child's pid is written there (whole, by a
    rename) once it runs, for a test that signals the child itself."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = json.dumps({"args": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    socket.send_fds(conn, [_INT.pack(len(request))], [0, 1, 2])
    conn.sendall(request)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the child's pipes close when the child exits, not when we do
        os.dup2(devnull, fd)
    os.close(devnull)
    pid = _read_int(conn)
    if pid_file is not None:
        with open(f"{pid_file}.partial", "w") as file:
            file.write(str(pid))
        os.replace(f"{pid_file}.partial", pid_file)

    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    return _read_int(conn)


def exit_as(code: int) -> NoReturn:
    """Exit with ``code`` as the child did: a negative one by dying of that signal."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":  # the launcher: python -S zygote.py [--pid-file PATH] SOCKET ARGS...
    given = sys.argv[1:]
    where = given[1] if given[0] == "--pid-file" else None
    if where is not None:
        given = given[2:]
    exit_as(launch(given[0], given[1:], where))
