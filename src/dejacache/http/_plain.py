"""A minimal request/response model with the surface of httpx's that dejacache reads.

The transports that are not httpx (urllib3, so ``requests`` and botocore; aiohttp) restate
each request as a request object and answer it through the shared exchange
(``transport.handle_sync`` / ``handle_async``). When the process has already imported httpx
or httpx2 those objects are theirs; otherwise they are this module's, so ``pip install
dejacache`` plus ``requests`` or ``boto3`` records and replays with nothing else installed.
httpx as a dependency would have cost every install five packages (httpx, httpcore, h11,
anyio, sniffio: ~2 MB installed, beside idna and certifi that requests brings anyway) and
an import of httpx on the first intercepted call, for the dozen names below.

Keys must not depend on which model carried the request, so the parts a key reads are
derived as httpx derives them (``tests/http/test_plain.py`` checks them against httpx and
httpx2 under Hypothesis): ``url.host`` lower-cased, ``url.path`` with dot segments removed
then percent-decoded, ``url.params`` as ``parse_qsl(keep_blank_values=True)``, header names
lower-cased by ``multi_items()``, and ``Host`` / ``Content-Length`` added as httpx adds them.
Bodies are decoded from gzip and deflate (and br / zstd when their packages are installed),
as httpx does.
"""

from __future__ import annotations

import contextlib
import http
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from .codings import codings, decompressor

__all__ = [
    "AsyncByteStream", "ByteStream", "CloseError", "ConnectError", "ConnectTimeout",
    "DecodingError", "HTTPError", "Headers", "LocalProtocolError", "NetworkError",
    "PoolTimeout", "ProtocolError", "ProxyError", "ReadError", "ReadTimeout",
    "RemoteProtocolError", "Request", "RequestError", "RequestNotRead", "Response",
    "ResponseNotRead", "StreamConsumed", "StreamError", "SyncByteStream", "TimeoutException",
    "TransportError", "URL", "UnsupportedProtocol", "WriteError", "WriteTimeout",
]

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


# ---------------------------------------------------------------- errors (httpx's family)


class HTTPError(Exception):
    pass


class RequestError(HTTPError):
    def __init__(self, message: str, *, request: Request | None = None) -> None:
        super().__init__(message)
        self.request = request


class TransportError(RequestError):
    pass


class TimeoutException(TransportError):
    pass


class ConnectTimeout(TimeoutException):
    pass


class ReadTimeout(TimeoutException):
    pass


class WriteTimeout(TimeoutException):
    pass


class PoolTimeout(TimeoutException):
    pass


class NetworkError(TransportError):
    pass


class ConnectError(NetworkError):
    pass


class ReadError(NetworkError):
    pass


class WriteError(NetworkError):
    pass


class CloseError(NetworkError):
    pass


class ProtocolError(TransportError):
    pass


class LocalProtocolError(ProtocolError):
    pass


class RemoteProtocolError(ProtocolError):
    pass


class ProxyError(TransportError):
    pass


class UnsupportedProtocol(TransportError):
    pass


class DecodingError(RequestError):
    pass


class StreamError(RuntimeError):
    pass


class StreamConsumed(StreamError):
    pass


class ResponseNotRead(StreamError):
    pass


class RequestNotRead(StreamError):
    pass


# ---------------------------------------------------------------- URL and headers


def _remove_dot_segments(path: str) -> str:
    if "." not in path:
        return path
    parts = path.split("/")
    if "." not in parts and ".." not in parts:
        return path
    out: list[str] = []
    for part in parts:
        if part == ".":
            continue
        if part == "..":
            if out and out != [""]:
                out.pop()
            continue
        out.append(part)
    return "/".join(out)


class _Params:
    """The query's pairs, grouped by name in the order names first appear (as httpx's
    ``QueryParams`` lists them: ``a=1&b=2&a=3`` is a=1, a=3, b=2)."""

    __slots__ = ("_items",)

    def __init__(self, query: str) -> None:
        grouped: dict[str, list[str]] = {}
        for k, v in parse_qsl(query, keep_blank_values=True):
            grouped.setdefault(k, []).append(v)
        self._items = [(k, v) for k, vs in grouped.items() for v in vs]

    def multi_items(self) -> list[tuple[str, str]]:
        return list(self._items)


class URL:
    """An absolute URL, its parts as httpx's ``URL`` gives them."""

    __slots__ = ("_text", "host", "params", "path", "port", "query", "raw_path", "scheme")

    def __init__(self, url: str | URL) -> None:
        text = str(url)
        parts = urlsplit(text)
        self.scheme = parts.scheme.lower()
        host = (parts.hostname or "").lower()
        if host.startswith("xn--"):
            with contextlib.suppress(UnicodeError):
                host = host.encode("ascii").decode("idna")
        self.host = host
        port = parts.port
        self.port = None if port == _DEFAULT_PORTS.get(self.scheme) else port
        raw = _remove_dot_segments(parts.path) if (self.scheme or parts.netloc) else parts.path
        self.path = unquote(raw or "/")
        self.query = parts.query.encode("ascii", "backslashreplace")
        self.raw_path = _escaped(raw or "/") + (
            b"?" + self.query if parts.query else b"")
        self.params = _Params(parts.query)
        self._text = text

    @property
    def netloc(self) -> bytes:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return (host if self.port is None else f"{host}:{self.port}").encode("idna")

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"URL({self._text!r})"


def _escaped(path: str) -> bytes:
    """``path`` as httpx's ``raw_path`` has it: non-ASCII percent-encoded as UTF-8 (the key
    decodes the raw path around escaped delimiters, and must read what httpx reads)."""
    if path.isascii():
        return path.encode("ascii")
    return "".join(c if c.isascii() else quote(c, errors="surrogatepass")
                   for c in path).encode("ascii")


def _text(value: str | bytes) -> str:
    if isinstance(value, str):
        return value
    for encoding in ("ascii", "utf-8"):
        try:
            return value.decode(encoding)
        except UnicodeDecodeError:
            continue
    return value.decode("iso-8859-1")


HeaderItems = Iterable[tuple[str | bytes, str | bytes]] | Mapping[str, str]


class Headers:
    """Case-insensitive, multi-valued headers; ``get`` joins repeated values with ", " and
    ``multi_items`` lower-cases the names (both as httpx's ``Headers``)."""

    __slots__ = ("_list",)

    def __init__(self, headers: HeaderItems | Headers | None = None) -> None:
        self._list: list[tuple[str, str, str]] = []  # (name as given, lower-cased, value)
        if isinstance(headers, Headers):
            self._list = list(headers._list)
        elif isinstance(headers, Mapping):
            for k, v in headers.items():
                self.add(k, v)
        elif headers is not None:
            for k, v in headers:
                self.add(k, v)

    def add(self, name: str | bytes, value: str | bytes) -> None:
        n = _text(name)
        self._list.append((n, n.lower(), _text(value)))

    def multi_items(self) -> list[tuple[str, str]]:
        return [(low, v) for _, low, v in self._list]

    def items(self) -> list[tuple[str, str]]:
        return [(k, self[k]) for k in self.keys()]

    def keys(self) -> list[str]:
        return list(dict.fromkeys(low for _, low, _ in self._list))

    @property
    def raw(self) -> list[tuple[bytes, bytes]]:
        return [(k.encode("latin-1", "replace"), v.encode("latin-1", "replace"))
                for k, _, v in self._list]

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __getitem__(self, name: str) -> str:
        low = name.lower()
        found = [v for _, k, v in self._list if k == low]
        if not found:
            raise KeyError(name)
        return ", ".join(found)

    def __setitem__(self, name: str, value: str) -> None:
        low = name.lower()
        self._list = [t for t in self._list if t[1] != low]
        self.add(name, value)

    def __delitem__(self, name: str) -> None:
        low = name.lower()
        if not any(k == low for _, k, _ in self._list):
            raise KeyError(name)
        self._list = [t for t in self._list if t[1] != low]

    def setdefault(self, name: str, value: str) -> str:
        if name not in self:
            self.add(name, value)
        return self[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and any(k == name.lower() for _, k, _ in self._list)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._list)

    def __repr__(self) -> str:
        return f"Headers({self.multi_items()!r})"


# ---------------------------------------------------------------- bodies


class SyncByteStream:
    def __iter__(self) -> Iterator[bytes]:
        raise NotImplementedError("a sync byte stream must implement __iter__")
        yield b""  # pragma: no cover

    def close(self) -> None:
        pass


class AsyncByteStream:
    async def __aiter__(self) -> AsyncIterator[bytes]:
        raise NotImplementedError("an async byte stream must implement __aiter__")
        yield b""  # pragma: no cover

    async def aclose(self) -> None:
        pass


class ByteStream(SyncByteStream, AsyncByteStream):
    """Bytes already in memory, read sync or async."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self._data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._data


class _Decoder:
    """``Content-Encoding`` undone chunk by chunk (encodings applied last are undone first;
    one this process cannot decode is passed through, as httpx does)."""

    def __init__(self, encodings: str) -> None:
        self._steps: list[Any] = []
        for name in reversed(codings(encodings)):
            step = decompressor(name)
            if step is not None:
                self._steps.append(step)

    def feed(self, data: bytes) -> bytes:
        try:
            for step in self._steps:
                data = step.decompress(data) if data else data
        except zlib.error as exc:
            raise DecodingError(str(exc)) from exc
        return data

    def flush(self) -> bytes:
        data = b""
        for step in self._steps:  # what one step still holds goes through the next ones
            if data:
                data = step.decompress(data)
            data += step.flush()
        return data


# ---------------------------------------------------------------- request and response


class Request:
    __slots__ = ("content", "extensions", "headers", "method", "stream", "url")

    def __init__(self, method: str | bytes, url: str | URL, *,
                 headers: HeaderItems | Headers | None = None, content: bytes = b"",
                 extensions: dict[str, Any] | None = None) -> None:
        self.method = _text(method).upper()
        self.url = url if isinstance(url, URL) else URL(url)
        self.headers = Headers(headers)
        self.content = bytes(content)
        self.stream = ByteStream(self.content)
        self.extensions = extensions or {}
        # What httpx adds to every request it builds (neither is keyed: both describe the
        # wire), so a request reads the same from either model.
        if self.content and "content-length" not in self.headers \
                and "transfer-encoding" not in self.headers:
            self.headers.add("Content-Length", str(len(self.content)))
        front = []
        if "host" not in self.headers and self.url.host:
            front.append(("Host", self.url.netloc.decode("ascii", "replace")))
        if not self.content and self.method in ("POST", "PUT", "PATCH") \
                and "content-length" not in self.headers \
                and "transfer-encoding" not in self.headers:
            front.append(("Content-Length", "0"))
        if front:
            rest = self.headers
            self.headers = Headers(front)
            self.headers._list.extend(rest._list)

    def read(self) -> bytes:
        return self.content

    async def aread(self) -> bytes:
        return self.content

    def __repr__(self) -> str:
        return f"<Request({self.method!r}, {str(self.url)!r})>"


class Response:
    def __init__(self, status_code: int, *, headers: HeaderItems | Headers | None = None,
                 content: bytes | None = None, stream: Any = None,
                 request: Request | None = None,
                 extensions: dict[str, Any] | None = None) -> None:
        self.status_code = status_code
        self.headers = Headers(headers)
        self.request = request
        self.extensions = extensions or {}
        self.is_stream_consumed = False
        self.is_closed = False
        self._content: bytes | None = None
        if stream is None:
            body = content or b""
            if body and "content-length" not in self.headers \
                    and "transfer-encoding" not in self.headers:
                self.headers.add("Content-Length", str(len(body)))
            self.stream: Any = ByteStream(body)
            self.read()
        else:
            self.stream = stream

    @property
    def reason_phrase(self) -> str:
        given = self.extensions.get("reason_phrase")
        if isinstance(given, bytes):
            return given.decode("ascii", "replace")
        try:
            return http.HTTPStatus(self.status_code).phrase
        except ValueError:
            return ""

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise ResponseNotRead("the response body has not been read")
        return self._content

    def _decoder(self) -> _Decoder:
        return _Decoder(self.headers.get("content-encoding", ""))

    def read(self) -> bytes:
        if self._content is None:
            self._content = b"".join(self.iter_bytes())
        return self._content

    async def aread(self) -> bytes:
        if self._content is None:
            self._content = b"".join([c async for c in self.aiter_bytes()])
        return self._content

    def iter_raw(self) -> Iterator[bytes]:
        if self.is_stream_consumed:
            raise StreamConsumed("the response body was read already")
        self.is_stream_consumed = True
        try:
            for chunk in self.stream:
                if chunk:
                    yield chunk
        finally:
            self.close()

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        if self.is_stream_consumed:
            raise StreamConsumed("the response body was read already")
        self.is_stream_consumed = True
        try:
            async for chunk in self.stream:
                if chunk:
                    yield chunk
        finally:
            await self.aclose()

    def iter_bytes(self) -> Iterator[bytes]:
        if self._content is not None:
            if self._content:
                yield self._content
            return
        decoder = self._decoder()
        for chunk in self.iter_raw():
            out = decoder.feed(chunk)
            if out:
                yield out
        tail = decoder.flush()
        if tail:
            yield tail

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        if self._content is not None:
            if self._content:
                yield self._content
            return
        decoder = self._decoder()
        async for chunk in self.aiter_raw():
            out = decoder.feed(chunk)
            if out:
                yield out
        tail = decoder.flush()
        if tail:
            yield tail

    def close(self) -> None:
        if not self.is_closed:
            self.is_closed = True
            close = getattr(self.stream, "close", None)
            if close is not None:
                close()

    async def aclose(self) -> None:
        if not self.is_closed:
            self.is_closed = True
            aclose = getattr(self.stream, "aclose", None)
            if aclose is not None:
                await aclose()

    def __repr__(self) -> str:
        return f"<Response [{self.status_code} {self.reason_phrase}]>"
