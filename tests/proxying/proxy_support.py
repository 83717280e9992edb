"""What the proxy's tests share: the proxy's environment, the Node clients, a stopped
provider that counts the connections still made to it, cassette reading, a raw loopback
upstream to build the answers a test needs on, and a client that stops reading its answer
(a small receive window) with the wait for the proxy's writes to back up on it."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson
import pytest

if TYPE_CHECKING:
    from dejacache.proxying._connection import Connection
    from dejacache.proxying._server import ProxyServer

NODE_DIR = pathlib.Path(__file__).resolve().parents[1] / "node"
CLIENTS = NODE_DIR / "clients.mjs"
# The keys tests/node/clients.mjs sends: no file may hold them.
NODE_KEYS = ("sk-node-openai-9f3c2b7e1d", "sk-ant-node-4e8a1c6f2b")
# The AWS access key of the module proxies (conftest's proxy_process): it signs again.
PROXY_AWS_KEY = "AKIAPROXYDEJACACHE01"


def proxy_env(directory: pathlib.Path, **extra: str) -> dict[str, str]:
    """The environment a proxy subprocess runs with: this one's, without what would change
    its default mode, with the suite's masking key and a cache directory of its own."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "DEJACACHE_MODE", "DEJACACHE_MAX_AGE", "DEJACACHE_ON_EXPIRY",
                        "DEJACACHE_VOLATILE", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
                        "OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    env.update(DEJACACHE_SECRET_KEY="dejacache-test-suite",
               DEJACACHE_DIR=str(directory / ".dejacache"), **extra)
    return env


def need_node() -> None:
    """Skip, saying how to install them, without node or the SDKs of tests/node."""
    if shutil.which("node") is None:
        pytest.skip("node is not on PATH (the Node SDK tests need node >= 20)")
    if not (NODE_DIR / "node_modules" / "openai").is_dir():
        pytest.skip("the Node SDKs are not installed: make node-deps (npm ci in tests/node)")


def run_node(script: pathlib.Path, *args: str, env: dict[str, str] | None = None,
             timeout: float = 90.0) -> Any:
    """Run a Node script; the JSON document it prints last."""
    out = subprocess.run(["node", str(script), *args], capture_output=True, text=True,
                         timeout=timeout, cwd=NODE_DIR, env=env)
    assert out.returncode == 0, out.stderr
    return orjson.loads(out.stdout.strip().splitlines()[-1])


def clients(base: str, *scenarios: str, suffix: str = "") -> dict[str, Any]:
    """tests/node/clients.mjs through ``base``: scenario -> what the SDK returned
    (``suffix`` is appended to every prompt)."""
    need_node()
    env = {**os.environ, "PROMPT_SUFFIX": suffix}
    result: dict[str, Any] = run_node(CLIENTS, base, *scenarios, env=env)
    return result


def files_text(directory: pathlib.Path) -> Iterator[tuple[pathlib.Path, str]]:
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            yield path, path.read_text(errors="replace")


def entries(path: pathlib.Path) -> list[dict[str, Any]]:
    doc = orjson.loads(path.read_bytes())
    out: list[dict[str, Any]] = doc["entries"]
    return out


class RawUpstream:
    """A loopback HTTP/1.1 upstream on asyncio streams, for answers no real server gives on
    cue: :meth:`answer` writes each request's (``body``: its bytes), on the connection it came
    by, as long as the client keeps it. A connection gone before its answer ends calls
    :meth:`gone`."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self._serving: set[asyncio.Task[Any]] = set()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in self._serving:
            task.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)

    async def answer(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        raise NotImplementedError

    def gone(self) -> None:
        """A connection ended before its answer did."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._serving.add(task)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await self.answer(writer, await reader.readexactly(length))
        except (ConnectionError, asyncio.IncompleteReadError):
            self.gone()
        except asyncio.CancelledError:
            pass  # stopped (a pooled connection of the proxy's, left open)
        finally:
            writer.close()
            self._serving.discard(task)


async def small_window_client(server: ProxyServer, request: bytes) -> socket.socket:
    """A client socket with a small receive buffer (4 KiB: the proxy's writes back up at
    once), ``request`` sent on it."""
    port = urlsplit(server.url).port
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, request)
    return sock


async def writes_waiting(server: ProxyServer) -> Connection:
    """Once the proxy's writes to the client it answers wait on that client (its socket
    buffer full), the proxy's side of that connection: ``_stalled_since`` says since when
    (loop time), 0.0 once they no longer wait. Waited for, not guessed: how long the proxy
    takes to fill the buffers between depends on the box's load (seconds on a busy one)."""
    for _ in range(3000):
        for conn in server._connections:
            if conn.task is not None and conn._stalled_since:
                return conn
        await asyncio.sleep(0.01)
    raise AssertionError("the proxy's writes never waited on its client")


async def read_to_end(sock: socket.socket) -> bytes:
    """What arrives until the proxy ends the connection (a reset ends it too)."""
    loop = asyncio.get_running_loop()
    data = bytearray()
    try:
        while part := await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 10):
            data += part
    except ConnectionResetError:
        pass
    return bytes(data)
