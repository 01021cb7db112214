"""Every async test runs on asyncio and on trio.

PostgreSQL: ``pg_dsn`` is a server for the whole test session — ``AGENTLOOP_PG_DSN``, else a
throwaway cluster started from the installed binaries (as the ``postgres`` user when running as
root) and removed at the end; ``pg_schema_dsn`` gives each test a fresh schema on it. Without a
server those tests skip, unless ``AGENTLOOP_REQUIRE_PG=1``, which makes them fail.

Mark a test ``@pytest.mark.fake_clock`` to run its trio variant on ``trio.testing.MockClock``
(autojump): there it may assert exact times. Its asyncio variant runs in real time, scaled down
by the ``timescale`` fixture, and asserts order only. Fake-clock tests touch no socket and no
thread (autojump would fire while they wait).
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import pytest
from hypothesis import settings

from tests.support.heap import freeze_what_lives

settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Real provider calls fail in this suite unless a test opts in (see agentloop.testing).
os.environ.setdefault("AGENTLOOP_BLOCK_REMOTE_MODELS", "1")


def _bytecode_cache_folder() -> str | None:
    """This environment's bytecode cache for the suite, in the temporary folder: one folder per
    user, private to them (refused, ``None``, if someone else owns it or may write to it: its
    files are code this interpreter would run), and in it one per Python environment
    (``sys.prefix``). The caches of environments that no longer exist (CI makes a new one each
    time) are removed here, so what is kept stays bounded by the environments there are."""
    import getpass
    import shutil
    import zlib

    user = os.path.join(tempfile.gettempdir(), f"agentloop-tests-pycache-{getpass.getuser()}")
    folder = os.path.join(user, f"{zlib.crc32(sys.prefix.encode()):08x}")
    try:
        os.makedirs(user, mode=0o700, exist_ok=True)
        info = os.stat(user)
        if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o022):
            return None
        for name in os.listdir(user):
            other = os.path.join(user, name)
            try:
                with open(os.path.join(other, "environment"), encoding="utf-8") as file:
                    gone = not os.path.isdir(file.read())
            except OSError:
                gone = other != folder
            if gone:
                shutil.rmtree(other, ignore_errors=True)
        os.makedirs(folder, exist_ok=True)
        _seed_from_installed_bytecode(folder)
        partial = os.path.join(folder, f"environment.{os.getpid()}")
        with open(partial, "w", encoding="utf-8") as file:
            file.write(sys.prefix)
        os.replace(partial, os.path.join(folder, "environment"))  # whole: others read it
    except OSError:
        return None
    return folder


def _seed_from_installed_bytecode(folder: str) -> None:
    """A new cache starts with the bytecode the environment already has: pip compiled every
    package it installed into its ``__pycache__`` folders, and the standard library comes
    compiled. Under a prefix Python reads the prefix only, so without this, in a fresh
    environment (every CI run), each xdist worker compiled the SDKs and the standard library
    from source, all at the same time (8.6 s of CPU to collect the suite, 6.4 s seeded, 1.9 s
    warm), and so did each interpreter the tests started before the cache filled. The files
    are linked (copied across file systems); Python checks them against their sources as it
    would in ``__pycache__``, and replaces rather than rewrites a stale one, so the originals
    are never changed. Done once per environment (``seeded`` says so)."""
    marker = os.path.join(folder, "seeded")
    if os.path.exists(marker):
        return
    installed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    suffix = f".{sys.implementation.cache_tag}.pyc"  # not the optimised or the pytest ones
    try:
        for root in dict.fromkeys(sys.path):
            real = os.path.realpath(root) if root else ""
            if os.path.isdir(real) and any(real.startswith(p + os.sep) for p in installed):
                for parent, folders, files in os.walk(root):
                    if os.path.basename(parent) == "__pycache__":
                        folders.clear()
                        _link_into(folder, parent, [n for n in files if n.endswith(suffix)])
        with open(marker, "w", encoding="utf-8"):
            pass
    except OSError:
        return  # what was linked stays valid; the rest is compiled as before


def _link_into(folder: str, pycache: str, names: list[str]) -> None:
    """Link ``pycache``'s files where the prefix ``folder`` has Python look for them."""
    import shutil

    if not names:
        return
    mirror = os.path.join(folder, os.path.dirname(pycache).lstrip(os.sep))
    os.makedirs(mirror, exist_ok=True)
    for name in names:
        source, target = os.path.join(pycache, name), os.path.join(mirror, name)
        if os.path.exists(target):
            continue
        try:
            os.link(source, target)
        except FileExistsError:
            pass  # another session seeding at the same time
        except OSError:
            shutil.copyfile(source, target)


def _share_bytecode_cache(config: pytest.Config) -> None:
    """With ``PYTHONDONTWRITEBYTECODE`` set (as CI does, to keep the checkout clean), every
    process the suite starts would compile agentloop and rewrite the test modules from source:
    each xdist worker, and each of the dozens of interpreters the tests start (the CLI, crash
    and writer workers, the examples), a third of a second or more of CPU apiece. Instead they
    all share one bytecode cache outside the checkout (``PYTHONPYCACHEPREFIX``).

    The cache is kept from one session to the next: a prefix replaces every ``__pycache__``,
    the installed packages' too, so a fresh one made each process compile the SDKs it imports
    from source (some 5,000 modules, seconds of CPU in each worker and in each interpreter
    started before the cache filled). Its files are checked against their sources' time and
    size as ``__pycache__`` ones are, so a kept one is never stale. This process uses it as
    well from here on (for the test modules, which pytest rewrites and caches through it), and
    the workers and everything the tests start inherit it."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or hasattr(config, "workerinput"):
        return
    cache = _bytecode_cache_folder()
    if cache is None:
        return
    saved = {
        name: os.environ.get(name) for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    }
    saved_prefix, saved_dont_write = sys.pycache_prefix, sys.dont_write_bytecode
    os.environ.pop("PYTHONDONTWRITEBYTECODE")
    os.environ["PYTHONPYCACHEPREFIX"] = cache
    sys.pycache_prefix, sys.dont_write_bytecode = cache, False

    def restore() -> None:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        sys.pycache_prefix, sys.dont_write_bytecode = saved_prefix, saved_dont_write

    config.add_cleanup(restore)


def _temporary_files_in_memory(config: pytest.Config) -> None:
    """The tests' temporary folders (``tmp_path``) in memory, in ``/dev/shm`` where there is
    one, unless a folder was chosen (``--basetemp``, ``PYTEST_DEBUG_TEMPROOT``). The SQLite
    session stores the tests make there sync every commit (``synchronous="FULL"``, the
    default), and on a disk each test waited for its syncs: seconds in a file of 100-run tests.
    No test can tell the difference (a sync matters only when the machine loses power).
    A small ``/dev/shm`` (a container's default is 64 MiB) is left alone."""
    memory = "/dev/shm"
    if (
        config.option.basetemp
        or "PYTEST_DEBUG_TEMPROOT" in os.environ
        or not os.path.isdir(memory)
        or not os.access(memory, os.W_OK | os.X_OK)
    ):
        return
    free = os.statvfs(memory)
    if free.f_bavail * free.f_frsize < 1 << 30:
        return
    os.environ["PYTEST_DEBUG_TEMPROOT"] = memory

    def restore() -> None:
        os.environ.pop("PYTEST_DEBUG_TEMPROOT", None)

    config.add_cleanup(restore)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "fake_clock: run the trio variant on MockClock(autojump_threshold=0)"
    )
    _share_bytecode_cache(config)
    _temporary_files_in_memory(config)
    from agentloop.models._transport import HTTPX, internals_checked

    if not internals_checked(*HTTPX):
        # httpx2 versions outside _transport.CHECKED (the floors, in the lowest-versions CI stage) read
        # replies through httpx2's aiter_raw(), whose nested generators (httpx2's and httpcore2's;
        # older httpx2 releases close fewer of them) are left to trio's finalizer when a reply is
        # closed early, and trio warns. That upstream leak is what the direct read avoids on
        # checked versions; here it is expected, and only it.
        config.addinivalue_line(
            "filterwarnings",
            r"ignore:Async generator 'http(x|core)2\.[\w.]+\.__aiter__' was garbage collected"
            ":ResourceWarning",
        )


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collecting made (the test modules and the SDKs they import: some 300,000 objects)
    lives as long as the session: frozen (``gc.freeze``), it is left out of every later full
    collection, which then scans only what the tests made (a fifth of a second less, each of
    the dozens of times). Garbage the tests make is collected, and warns, as before."""
    freeze_what_lives()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than there are cores (``--maxprocesses`` caps it). A third
    of the suite's time waits on servers, child processes and real-time bounds, and the extra
    worker fills those waits: on 2 cores, 142 s against 167 s with 2 workers (and 157 s with 4,
    whose start-up and collection cost more than they fill)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) + 1


@pytest.fixture(autouse=True, scope="module")
def _freeze_what_each_module_leaves() -> Iterator[None]:
    """At each module's end, what lives on (the SDKs and modules its tests imported, caches) is
    frozen too, as what collecting made was: else every later full collection in this worker
    walks it again. The module's garbage is collected first, so it still warns as before."""
    yield
    freeze_what_lives()


# The slow modules that take longest, longest first (seconds for the file alone, -n0, at load 2-3).
# xdist's worksteal hands each worker a contiguous share of the collection, so the first
# worker's share starts with every slow test, and the others, once idle, steal from its end: a
# long chain there (a module's processes, one 15 s test) would start last and end last.
LONGEST_FIRST = (
    "tests/web/test_replica_kills.py",  # 20-26: one cluster of processes for the module
    "tests/test_temporal_continue.py",  # 59: tests of 6-15 s
    "tests/web/test_replicas.py",  # 21
    "tests/test_temporal.py",  # 17
    "tests/test_temporal_crash.py",  # 16
    "tests/reliability/test_stream_bounds.py",  # 13
    "tests/web/test_browser.py",  # 12
)


def _slow_order(item: pytest.Item) -> tuple[bool, int]:
    """Slow tests first, the longest modules among them first; the order is otherwise kept."""
    path = item.nodeid.partition("::")[0]
    rank = LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)
    return item.get_closest_marker("slow") is None, rank


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs a Temporal dev server is slow (each xdist worker starts a server for its
    session, and a durable run is several activities): ``-m "not slow"``, the fast loop, starts
    none. So is one marked ``process``, which starts the command from scratch in a terminal
    (a second or two, most of it the SDKs' import, where a forked one takes a tenth). Then the slow tests first, the longest first (``LONGEST_FIRST``): in a parallel run a
    long test that starts near the end holds the whole suite up while the other workers sit
    idle."""
    for item in items:
        heavy = item.get_closest_marker("temporal") or item.get_closest_marker("process")
        if heavy and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    items.sort(key=_slow_order)


def _pg_unavailable(reason: str) -> NoReturn:
    if os.environ.get("AGENTLOOP_REQUIRE_PG") == "1":
        pytest.fail(f"PostgreSQL is required (AGENTLOOP_REQUIRE_PG=1) but {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A PostgreSQL server for this test session (``AGENTLOOP_PG_DSN`` or a throwaway cluster)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _pg_unavailable("psycopg is not installed (pip install 'agentloop-runtime[postgres]')")
    given = os.environ.get("AGENTLOOP_PG_DSN")
    if given:
        yield given
        return
    from tests.support.postgres import PostgresUnavailable, start_cluster

    try:
        cluster = start_cluster()
    except PostgresUnavailable as exc:
        _pg_unavailable(f"no server could be started: {exc}")
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def _pg_admin(pg_dsn: str) -> Iterator[Callable[[Any], None]]:
    """Runs ``pg_schema_dsn``'s statements on one connection for the session, where a connection
    each (a server process started and ended) cost each test two; a new one if it was lost."""
    import psycopg

    conn: psycopg.Connection[Any] | None = None

    def execute(statement: Any) -> None:
        nonlocal conn
        for attempt in (1, 2):
            if conn is None or conn.closed:
                conn = psycopg.connect(pg_dsn, autocommit=True)
            try:
                conn.execute(statement)
                return
            except psycopg.OperationalError:  # the server ended it (a test terminated backends)
                conn.close()
                if attempt == 2:
                    raise

    try:
        yield execute
    finally:
        if conn is not None:
            conn.close()


@pytest.fixture
def pg_schema_dsn(pg_dsn: str, _pg_admin: Callable[[Any], None]) -> Iterator[str]:
    """A DSN whose ``search_path`` is a fresh schema, dropped after the test."""
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    schema = f"agentloop_test_{uuid.uuid4().hex[:12]}"
    _pg_admin(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield make_conninfo(pg_dsn, options=f"-c search_path={schema}")
    finally:
        _pg_admin(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


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


def _temporal_unavailable(reason: str) -> NoReturn:
    if os.environ.get("AGENTLOOP_REQUIRE_TEMPORAL") == "1":
        pytest.fail(
            f"Temporal is required (AGENTLOOP_REQUIRE_TEMPORAL=1) but {reason}", pytrace=False
        )
    pytest.skip(f"Temporal tests skipped: {reason}")


@pytest.fixture(scope="session")
def temporal_target() -> Iterator[str]:
    """A Temporal dev server for this test session (each xdist worker starts its own)."""
    from tests.support.temporal import (
        ONE_PARTITION,
        UNTHROTTLED,
        TemporalUnavailableHere,
        start_dev_server,
    )

    try:
        server = start_dev_server(*ONE_PARTITION, *UNTHROTTLED)
    except TemporalUnavailableHere as exc:
        _temporal_unavailable(str(exc))
    try:
        yield server.target
    finally:
        server.stop()
