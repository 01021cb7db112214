"""Start the test server (``server.py``) as a fork of the warm zygote, and stand in for it.

``python launch.py SOCKET [--http]`` hands its standard input, output and error to the zygote
listening on the Unix socket ``SOCKET`` (``server.py --zygote SOCKET``), which forks a server
process onto them: the server has imported the SDK already, so it starts in milliseconds
instead of a second and a half. This process then holds none of those pipes (they close when the
server exits), passes SIGTERM, SIGINT and SIGHUP on to the server, and exits when it exits, with
its exit status. If this process is killed, the zygote kills the server.

It imports nothing heavy: its own start-up is the cost of a bare interpreter.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

_INT = struct.Struct("!i")


def _read_int(conn: socket.socket) -> int:
    data = b""
    while len(data) < _INT.size:
        more = conn.recv(_INT.size - len(data))
        if not more:
            raise SystemExit("launch.py: the zygote closed the connection")
        data += more
    return int(_INT.unpack(data)[0])


def main(path: str, args: list[str]) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    socket.send_fds(conn, [json.dumps(args).encode()], [0, 1, 2])
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the server's pipes close when the server exits, not when we do
        os.dup2(devnull, fd)
    os.close(devnull)
    pid = _read_int(conn)

    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    return _read_int(conn)


if __name__ == "__main__":
    code = main(sys.argv[1], sys.argv[2:])
    if code < 0:  # the server died of a signal: so do we
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)
