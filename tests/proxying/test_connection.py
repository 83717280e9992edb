"""A client connection to the proxy, over a raw socket: requests pipelined in one write are
answered in order, a client waiting for ``100 Continue`` gets it before sending its body, a
request the proxy cannot read ends the connection with its status, and a client that goes
away leaves the proxy serving others."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import httpx2

from dejacache.proxying.handle import ProxyProcess


def connect(process: ProxyProcess) -> socket.socket:
    url = urlsplit(process.url)
    return socket.create_connection((url.hostname, url.port), timeout=30)


def read_answers(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """``count`` answers framed by Content-Length: (status, body) each."""
    buf = b""
    out: list[tuple[int, bytes]] = []
    while len(out) < count:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode("latin-1").split("\r\n")
            length = next((int(line.split(":", 1)[1]) for line in head[1:]
                           if line.lower().startswith("content-length:")), 0)
            if len(buf) >= end + 4 + length:
                out.append((int(head[0].split()[1]), buf[end + 4:end + 4 + length]))
                buf = buf[end + 4 + length:]
                continue
        data = sock.recv(65536)
        assert data, f"connection closed after {len(out)} answers"
        buf += data
    return out


def test_pipelined_requests_are_answered_in_order(proxy_process: ProxyProcess) -> None:
    with connect(proxy_process) as sock:
        sock.sendall(b"GET /_dejacache HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /_dejacache/nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"GET /_dejacache HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = read_answers(sock, 3)
    assert [status for status, _ in answers] == [200, 404, 200]
    assert json.loads(answers[0][1])["url"] == proxy_process.url


def test_a_client_waiting_for_100_continue_gets_it_first(proxy_process: ProxyProcess) -> None:
    body = b'{"cassette": "continue-test"}'
    with connect(proxy_process) as sock:
        sock.sendall(b"POST /_dejacache/sessions HTTP/1.1\r\nHost: x\r\n"
                     b"Expect: 100-continue\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body))
        interim = sock.recv(65536)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        [(status, data)] = read_answers(sock, 1)
    assert status == 201, data
    opened = json.loads(data)
    closed = httpx2.post(f"{proxy_process.url}/_dejacache/sessions/{opened['id']}/close",
                         json={"ok": False}, timeout=30)
    assert closed.status_code == 200


def test_an_unreadable_request_ends_the_connection_with_its_status(
        proxy_process: ProxyProcess) -> None:
    with connect(proxy_process) as sock:
        sock.sendall(b"GET /_dejacache HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked"
                     b"\r\n\r\n")
        answers = read_answers(sock, 2)
        assert sock.recv(65536) == b""  # closed: nothing after the refusal is read
    assert [status for status, _ in answers] == [200, 400]
    assert b"both Content-Length and Transfer-Encoding" in answers[1][1]


def test_a_client_that_leaves_mid_request_leaves_the_proxy_serving(
        proxy_process: ProxyProcess) -> None:
    with connect(proxy_process) as sock:
        sock.sendall(b"POST /_dejacache/sessions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 100\r\n\r\n{\"cass")
    assert httpx2.get(f"{proxy_process.url}/_dejacache", timeout=30).status_code == 200
