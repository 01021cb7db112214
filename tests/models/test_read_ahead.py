"""Reading ahead while a large request body is written (``models/_read_ahead``): where the
driver installs it, that what it reads ahead is bounded and reaches the response in order, and
that cancellation and write timeouts stay what they are.

The reply that must survive a failed write (a 413 before the body was read) is tested end to
end in ``tests/reliability/test_provider_responses.py``.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.lowlevel
import httpcore2
import httpx2
import pytest

from agentloop.models import Message, ModelRequest
from agentloop.models import _transport as transport
from agentloop.models._read_ahead import (
    READ_AHEAD_LIMIT,
    ReadAheadBackend,
    read_ahead_on_writes,
)
from agentloop.testing import ProviderServer, ScriptedResponse

from ._provider_helpers import direct_paths_only, load, make_model

REQUEST = ModelRequest(messages=(Message.user("hi"),))
REPLY = "anthropic/stream_text_ping"


def _pool_backend(transport: Any) -> Any:
    return transport._pool._network_backend  # internal, as _read_ahead patches it


def _backend_of(http_client: Any) -> Any:
    return _pool_backend(http_client._transport)


@direct_paths_only
async def test_the_driver_reads_ahead_on_its_httpx_client(server: ProviderServer) -> None:
    """The httpx2 client a driver makes reads ahead (asyncio's sockets and trio's TLS streams
    need it); a client passed in is left as it is (its transport is the user's)."""
    server.enqueue(ScriptedResponse.sse(load(REPLY).body))
    async with make_model("anthropic", server.url, transport="httpx") as model:
        async with model.stream(REQUEST) as stream:
            assert [d async for d in stream]
        assert isinstance(_backend_of(model._client._client), ReadAheadBackend)

    import anthropic  # here, not at the top: a second of CPU for every worker that collects this

    own = anthropic.DefaultAsyncHttpxClient()
    client = anthropic.AsyncAnthropic(api_key="k", base_url=server.url, http_client=own)
    server.enqueue(ScriptedResponse.sse(load(REPLY).body))
    async with make_model("anthropic", server.url, client=client) as model:
        async with model.stream(REQUEST) as stream:
            assert [d async for d in stream]
    assert not isinstance(_backend_of(own), ReadAheadBackend)
    await client.close()


@direct_paths_only
def test_a_proxys_pool_reads_ahead_too() -> None:
    """A client with a proxy (given, or from the environment) sends through its proxy's pool:
    that pool reads ahead as well; a pattern mounted without a transport is skipped."""
    client = httpx2.AsyncClient(proxy="http://127.0.0.1:1", mounts={"http://direct.example": None})
    assert read_ahead_on_writes(client) == 2
    proxies = [t for t in client._mounts.values() if t is not None]
    assert [type(_pool_backend(t)) for t in proxies] == [ReadAheadBackend]
    assert read_ahead_on_writes(client) == 0  # wrapped once only


def test_unchecked_versions_are_left_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a version outside ``CHECKED`` the private attributes are not touched."""
    monkeypatch.setattr(transport, "internals_checked", lambda *dists: False)
    client = httpx2.AsyncClient()
    assert read_ahead_on_writes(client) == 0
    assert not isinstance(_backend_of(client), ReadAheadBackend)


class _RawServer:
    """A loopback server that runs ``handle(conn)`` for each connection, in a thread."""

    def __init__(self, handle: Any, tls: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.sock.getsockname()[1]}/"
        self._handle = handle
        self._tls = tls
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    if self._tls is None:
                        self._handle(conn)
                    else:
                        with self._tls.wrap_socket(conn, server_side=True) as tls_conn:
                            self._handle(tls_conn)
                except OSError:  # ssl.SSLError included
                    pass

    def __enter__(self) -> _RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(10)
        assert not self._thread.is_alive()


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    """The request's head and the bytes of its body read with it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


@contextmanager
def _reading_ahead_client(**options: Any) -> Iterator[tuple[httpx2.AsyncClient, list[Any]]]:
    """An httpx2 client whose pool reads ahead, and the list of connections it opened."""
    client = httpx2.AsyncClient(**options)
    assert read_ahead_on_writes(client) == 1
    opened: list[Any] = []
    backend: ReadAheadBackend = _backend_of(client)
    connect = backend.connect_tcp

    async def recording_connect(*args: Any, **kwargs: Any) -> httpcore2.AsyncNetworkStream:
        stream = await connect(*args, **kwargs)
        opened.append(stream)
        return stream

    backend.connect_tcp = recording_connect  # type: ignore[method-assign]
    yield client, opened


@direct_paths_only
async def test_what_is_read_ahead_is_bounded_and_arrives_in_order() -> None:
    """A server that streams a large reply while the request body is still being written: the
    connection reads ahead at most ``READ_AHEAD_LIMIT`` bytes (then flow control holds the
    server), the body arrives whole, and the reply arrives whole and in order.

    The reply's head goes out before the server reads any of the body, and the client's send
    buffer is small (the kernel's own grows to megabytes), so the client is still writing when
    the head arrives, however late the threads run: the write must wait for the server to read
    most of the body, and the read ahead reads the head meanwhile."""
    reply = bytes(range(256)) * (32 << 12)  # 8 MiB that show any reordering
    body = b"b" * (4 << 20)
    received: list[int] = []

    def handle(conn: socket.socket) -> None:
        head, rest = _read_head(conn)
        length = _content_length(head)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(reply))
        answer = threading.Thread(target=conn.sendall, args=(reply,))
        answer.start()  # the rest of the reply goes out while the body is still coming in
        got = len(rest)
        while got < length:
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            got += len(chunk)
        received.append(got)
        answer.join(10)

    small_send_buffer = httpx2.AsyncHTTPTransport(
        socket_options=[(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)]
    )
    most = 0
    with (
        _RawServer(handle) as server,
        _reading_ahead_client(transport=small_send_buffer) as (client, opened),
    ):
        async with client:

            async def watch() -> None:
                nonlocal most
                while True:
                    for stream in opened:
                        most = max(most, stream._early_bytes)
                    await anyio.lowlevel.checkpoint()

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                with anyio.fail_after(30):
                    response = await client.post(server.url, content=body)
                tg.cancel_scope.cancel()
    assert received == [len(body)]
    assert response.content == reply
    assert 0 < most <= READ_AHEAD_LIMIT


@contextmanager
def _never_reading_server() -> Iterator[_RawServer]:
    """A server that reads the request's head and then nothing, until the client gives up."""

    done = threading.Event()

    def handle(conn: socket.socket) -> None:
        _read_head(conn)
        done.wait(20)

    with _RawServer(handle) as server:
        try:
            yield server
        finally:
            done.set()


@direct_paths_only
async def test_cancelling_a_write_that_reads_ahead_is_a_cancellation() -> None:
    """A large write the server never takes, cancelled: the cancellation arrives as itself
    (the reading task ends with the write), and no task is left behind."""
    before = len(anyio.get_running_tasks())
    with _never_reading_server() as server, _reading_ahead_client() as (client, _):
        async with client:
            with anyio.move_on_after(0.5) as scope:
                await client.post(server.url, content=b"c" * (32 << 20))
    assert scope.cancelled_caught
    assert len(anyio.get_running_tasks()) == before


@direct_paths_only
async def test_a_write_that_reads_ahead_times_out_as_a_write_timeout() -> None:
    """httpx2's write timeout on a large write that reads ahead is ``WriteTimeout``, as itself
    (not wrapped in an exception group by the reading task's group)."""
    timeout = httpx2.Timeout(10.0, write=0.3)
    with _never_reading_server() as server, _reading_ahead_client(timeout=timeout) as (client, _):
        async with client:
            with anyio.fail_after(10), pytest.raises(httpx2.WriteTimeout):
                await client.post(server.url, content=b"t" * (32 << 20))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a self-signed certificate for 127.0.0.1, and a client context
    that trusts it."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    directory = tmp_path_factory.mktemp("tls")
    (directory / "cert.pem").write_bytes(cert_pem)
    (directory / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    client = ssl.create_default_context(cadata=cert_pem.decode())
    return server, client


@direct_paths_only
async def test_over_tls_an_early_reply_survives_and_a_large_body_arrives(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    """Over TLS the read ahead reads (and decrypts) while another task writes on the same TLS
    stream: a 413 sent before the body was read is read, and a body the server reads whole
    arrives whole."""
    server_tls, client_tls = tls
    body = b"s" * (4 << 20)

    def reject(conn: socket.socket) -> None:
        _read_head(conn)
        reply = b'{"error": {"message": "request entity too large"}}'
        conn.sendall(
            b"HTTP/1.1 413 Payload Too Large\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%b" % (len(reply), reply)
        )
        # Closing with unread bytes sends a reset, and a reset discards what the client has
        # not read yet: hold the connection a moment (unread: a client that does not read
        # ahead stays blocked writing) so that a busy machine's client reads its reply first.
        threading.Event().wait(0.5)

    def count(conn: socket.socket) -> None:
        head, rest = _read_head(conn)
        got, length = len(rest), _content_length(head)
        while got < length:
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            got += len(chunk)
        answer = str(got).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%b" % (len(answer), answer))

    with _reading_ahead_client(verify=client_tls) as (client, _):
        async with client:
            with _RawServer(reject, server_tls) as rejecting, anyio.fail_after(30):
                for _ in range(3):
                    response = await client.post(rejecting.url, content=body)
                    assert response.status_code == 413, response.text
            with _RawServer(count, server_tls) as counting, anyio.fail_after(30):
                response = await client.post(counting.url, content=body)
                assert (response.status_code, response.text) == (200, str(len(body)))
