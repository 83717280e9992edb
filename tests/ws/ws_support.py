"""Loopback WebSocket servers for the tests: a real ``websockets`` server on 127.0.0.1 in a
thread of its own, counting connections and keeping what each handshake sent (the tests
check that credentials reach the server live and no file).

:func:`tls_pair` makes a throwaway certificate authority and a certificate for 127.0.0.1:
google-genai's Live API always dials ``wss://``, so its fake serves TLS that the test's
client context trusts.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import pathlib
import ssl
import threading
from collections.abc import Awaitable, Callable
from typing import Any

Handler = Callable[[Any], Awaitable[None]]


class LoopbackServer:
    """``handler`` served on a free loopback port until :meth:`stop`."""

    def __init__(self, handler: Handler, *, ssl_context: ssl.SSLContext | None = None,
                 process_request: Any = None, subprotocols: Any = None) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.process_request = process_request
        self.subprotocols = subprotocols
        self.port = 0
        self.connections = 0
        self.requests: list[dict[str, Any]] = []  # path and headers of each handshake
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="ws-fake")

    @property
    def url(self) -> str:
        scheme = "wss" if self.ssl_context is not None else "ws"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> LoopbackServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake WebSocket server did not start")
        return self

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        self._thread.join(10)

    def _select(self, conn: Any, offered: Any) -> Any:
        return next((p for p in self.subprotocols or () if p in offered), None)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        from websockets.asyncio.server import serve

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        async def handle(ws: Any) -> None:
            self.connections += 1
            req = ws.request
            self.requests.append({"path": req.path, "headers": list(req.headers.raw_items())})
            await self.handler(ws)

        async with serve(handle, "127.0.0.1", 0, ssl=self.ssl_context, max_size=None,
                         compression=None, process_request=self.process_request,
                         select_subprotocol=self._select) as server:
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            await self._stop.wait()


def tls_pair(where: pathlib.Path) -> tuple[ssl.SSLContext, pathlib.Path]:
    """(the server's context, the CA file a client trusts) for a certificate of 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dejacache test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    where.mkdir(parents=True, exist_ok=True)
    ca_file = where / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain = where / "server.pem"
    chain.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(chain)
    return ctx, ca_file


def pcm(seconds: float, rate: int, seed: int = 0) -> bytes:
    """``seconds`` of 16-bit mono PCM at ``rate`` Hz: a tone whose pitch depends on ``seed``
    (deterministic, so the same input is the same bytes in two tests)."""
    import math
    import struct

    n = int(seconds * rate)
    step = 2 * math.pi * (220 + 20 * seed) / rate
    return struct.pack(f"<{n}h", *(int(9000 * math.sin(i * step)) for i in range(n)))


async def echo(ws: Any) -> None:
    """The generic test protocol: ``hello`` first; each JSON message ``{"n": k}`` answered
    with ``{"ack": k}`` (after ``{"wait": s}`` seconds when asked, then ``{"late": k}``);
    ``{"close": code}`` closes with that code; ``{"drop": true}`` drops the connection; a
    binary message comes back reversed; ``{"parts": [...]}`` comes back as one fragmented
    message; ``{"ping": true}`` is answered after a ping frame the client has ponged;
    ``{"big": n}`` is answered with a text message of ``n`` bytes."""
    import json

    await ws.send(json.dumps({"hello": ws.request.path}))
    async for raw in ws:
        if isinstance(raw, bytes):
            await ws.send(raw[::-1])
            continue
        msg = json.loads(raw)
        if "close" in msg:
            await ws.close(msg["close"], msg.get("reason", ""))
            return
        if msg.get("drop"):
            ws.transport.abort()
            return
        if "parts" in msg:
            await ws.send(iter(msg["parts"]))
            continue
        if "big" in msg:
            await ws.send("y" * msg["big"])
            continue
        if msg.get("ping"):
            await (await ws.ping(b"are you there"))  # answered by the client's library
        await ws.send(json.dumps({"ack": msg.get("n")}))
        if msg.get("wait"):
            await asyncio.sleep(msg["wait"])
            await ws.send(json.dumps({"late": msg.get("n")}))


async def count(ws: Any) -> None:
    """Answers each message with its length (``{"got": n}``), read fragment by fragment:
    nothing held whole here either."""
    import json

    while True:
        n = 0
        async for part in ws.recv_streaming():
            n += len(part)
        await ws.send(json.dumps({"got": n}))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RawServer:
    """A WebSocket server written from the wire up (RFC 6455), on a free loopback port in a
    thread of its own: it answers the handshake, sends ``{"hello": true}``, and answers the
    client's first message with ``frame`` (bytes as they go on the wire: the tests send
    frames no library writes, reserved bits set or text that is not UTF-8). It then answers
    a close frame with its own, and ends."""

    GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self, frame: bytes) -> None:
        import socket

        self.frame = frame
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True, name="ws-raw")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/raw"

    def stop(self) -> None:
        import socket

        with contextlib.suppress(OSError):  # (wakes the accept() closing alone did not)
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(10)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # stopped
                return
            with conn:
                conn.settimeout(10)
                with contextlib.suppress(OSError):  # the client went first
                    self._session(conn)

    def _session(self, conn: Any) -> None:
        import base64
        import hashlib

        head = b""
        while b"\r\n\r\n" not in head:
            got = conn.recv(4096)
            if not got:
                return
            head += got
        lines = head.split(b"\r\n\r\n")[0].split(b"\r\n")
        fields = dict(ln.split(b":", 1) for ln in lines[1:])
        key = next(v.strip() for k, v in fields.items() if k.lower() == b"sec-websocket-key")
        accept = base64.b64encode(hashlib.sha1(key + self.GUID).digest())
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        hello = b'{"hello":true}'
        conn.sendall(bytes((0x81, len(hello))) + hello)
        reader = _FrameReader(conn)
        opcode, _ = reader.frame()
        if opcode is None:
            return
        conn.sendall(self.frame)
        while True:
            opcode, payload = reader.frame()
            if opcode is None:
                return
            if opcode == 8:  # the client's close: answered with its code
                conn.sendall(bytes((0x88, len(payload[:2]))) + payload[:2])
                return


class _FrameReader:
    """A client's masked frames off a socket: ``(opcode, payload)``, ``(None, b"")`` at
    the end."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.buf = b""

    def _take(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            got = self.conn.recv(65536)
            if not got:
                return None
            self.buf += got
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self) -> tuple[int | None, bytes]:
        head = self._take(2)
        if head is None:
            return None, b""
        n = head[1] & 0x7F
        if n == 126:
            n = int.from_bytes(self._take(2) or b"\0\0", "big")
        elif n == 127:
            n = int.from_bytes(self._take(8) or bytes(8), "big")
        mask = self._take(4) or bytes(4)
        data = self._take(n) or b""
        return head[0] & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(data))
