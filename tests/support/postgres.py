"""A throwaway PostgreSQL cluster for tests and benchmarks.

It runs the installed server binaries (``pg_config --bindir``, else the newest
``/usr/lib/postgresql/*/bin``) on a private data folder that listens only on a unix socket in that
folder, tuned for speed over durability. ``initdb`` refuses to run as root, so as root the cluster
runs as the ``postgres`` system user, with folders it owns.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

_SETTINGS = {
    "listen_addresses": "''",
    "port": "5432",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "'32MB'",
    "max_connections": "200",
    "log_min_messages": "'warning'",
}


class PostgresUnavailable(RuntimeError):
    """No cluster could be started here; the message says why."""


def find_bindir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are, or None."""
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        bindir = Path(out.stdout.strip())
        if out.returncode == 0 and (bindir / "initdb").exists():
            return bindir

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", path.parent.name))

    candidates = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()]
    return max(candidates, key=version) if candidates else None


@dataclass
class TemporaryCluster:
    """A running cluster: ``url`` connects to its ``postgres`` database as ``postgres``."""

    root: Path
    bindir: Path
    prefix: list[str]
    url: str

    def stop(self) -> None:
        """Fast shutdown, then remove every file."""
        try:
            _run([*self.prefix, str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"),
                  "-m", "fast", "-w", "stop"], "pg_ctl stop", timeout=60)  # fmt: skip
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _run(cmd: list[str], what: str, *, timeout: float) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PostgresUnavailable(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-800:]
        raise PostgresUnavailable(f"{what} exited with {done.returncode}: {tail}")


def _as_postgres_user(root: Path) -> list[str]:
    """The command prefix that runs the server as ``postgres`` when we are root, else []."""
    if os.geteuid() != 0:
        return []
    import pwd

    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable("running as root and there is no 'postgres' user") from None
    os.chown(root, entry.pw_uid, entry.pw_gid)
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresUnavailable("running as root and 'runuser' is not installed")
    return [runuser, "-u", "postgres", "--"]


def start_cluster(*, timeout: float = 60.0) -> TemporaryCluster:
    """Initialise and start a cluster; ``PostgresUnavailable`` when that cannot be done here."""
    bindir = find_bindir()
    if bindir is None:
        raise PostgresUnavailable(
            "no PostgreSQL server binaries (tried pg_config --bindir and /usr/lib/postgresql/*/bin)"
        )
    root = Path(tempfile.mkdtemp(prefix="agentloop-pg-"))
    data = root / "data"
    prefix: list[str] = []
    try:
        prefix = _as_postgres_user(root)
        _run([*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
              "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"], "initdb",
             timeout=timeout)  # fmt: skip
        socket_dir = str(root).replace("'", "''")
        settings = {**_SETTINGS, "unix_socket_directories": f"'{socket_dir}'"}
        with (data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        _run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"),
              "-w", "-t", str(int(timeout)), "start"], "pg_ctl start", timeout=timeout + 5)  # fmt: skip
    except PostgresUnavailable as exc:
        log = root / "server.log"
        if log.exists():
            # pg_ctl may give up while the server still runs: make sure it is gone.
            subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                            "stop"], capture_output=True, timeout=30, check=False)  # fmt: skip
            exc.add_note("server log: " + log.read_text(errors="replace")[-800:])
        shutil.rmtree(root, ignore_errors=True)
        raise
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    url = f"postgresql://postgres@/postgres?host={quote(str(root), safe='')}&port=5432"
    return TemporaryCluster(root=root, bindir=bindir, prefix=prefix, url=url)


@contextlib.contextmanager
def temporary_cluster() -> Iterator[str]:
    """A running throwaway cluster's URL, stopped and removed on exit."""
    cluster = start_cluster()
    try:
        yield cluster.url
    finally:
        cluster.stop()
