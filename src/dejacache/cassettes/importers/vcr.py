"""vcrpy / pytest-recording cassettes: each interaction replayed through the live HTTP path.

A vcrpy cassette holds ``interactions``, each a ``request`` (method, uri, body, headers as
name -> list) and a ``response`` (status code and message, headers, ``body.string`` as text or
``!!binary`` bytes; older httpx recordings used ``status_code`` and ``content``). vcrpy's
httpx stub keeps the body as it came off the wire, so a gzip answer is stored compressed with
its ``content-encoding`` header; a streamed answer (``stream=True``) is one
``text/event-stream`` body.

Each interaction becomes an ``httpx`` request handed to the transport's ``handle_sync`` inside
the import's record block, with the recorded response standing in for the network. The key,
the provider's call name, id aliasing across turns, SSE splitting into events and the stored
shape are therefore exactly those of a live call, and a recorded stream replays as a stream.
Request headers are never stored by that path; the credentials among them are counted in the
report.
"""

from __future__ import annotations

import importlib
import io
import pathlib
import urllib.parse
from typing import Any

from ...errors import CassetteError, ConfigurationError
from ...http._libs import Lib, available
from ...http.providers import detect
from ...http.transport import Options, handle_sync
from ...scope import current
from ..redact import Redactor
from ..store import Cassette
from . import Converted, ImportReport, Skipped

__all__ = ["convert", "load_yaml"]

# Recomputed by the HTTP library from the body it is given (vcrpy kept the wire's values).
_WIRE_HEADERS = frozenset({"content-length", "transfer-encoding", "host", "connection"})


class _Skip(Exception):
    pass


def load_yaml(raw: bytes, path: pathlib.Path) -> Any:
    """Parse vcrpy's YAML with a safe loader that also builds the few Python tags vcrpy
    writes for request bodies (str, tuple, BytesIO, iterators); any other tag is refused."""
    try:  # (imported by name: PyYAML ships no type information)
        yaml: Any = importlib.import_module("yaml")
    except ImportError:
        raise ConfigurationError(
            f"{path} looks like a YAML (vcrpy) cassette; reading it needs PyYAML: "
            "pip install 'dejacache[import]'") from None
    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc]
        pass

    def as_str(loader: Any, node: Any) -> Any:
        return loader.construct_scalar(node)

    def as_tuple(loader: Any, node: Any) -> Any:
        return tuple(loader.construct_sequence(node))

    def as_bytes(loader: Any, node: Any) -> Any:
        state = loader.construct_mapping(node, deep=True).get("state") or (b"",)
        data = state[0] if state else b""
        return data.encode() if isinstance(data, str) else bytes(data or b"")

    def as_list(loader: Any, node: Any) -> Any:
        args: Any = loader.construct_mapping(node, deep=True).get("args") or ([],)
        return list(args[0] if args else [])

    tag = "tag:yaml.org,2002:python/"
    Loader.add_constructor(tag + "str", as_str)
    Loader.add_constructor(tag + "unicode", as_str)
    Loader.add_constructor(tag + "tuple", as_tuple)
    Loader.add_constructor(tag + "object/new:_io.BytesIO", as_bytes)
    Loader.add_constructor(tag + "object/apply:builtins.iter", as_list)
    try:
        return yaml.load(raw, Loader=Loader)  # a safe loader, plus the plain tags above
    except yaml.YAMLError as exc:
        raise CassetteError(f"not a readable YAML cassette: {exc}", path=path) from None


def _pairs(headers: Any) -> list[tuple[str, str]]:
    """vcrpy headers (name -> list of values, or name -> value) as pairs."""
    if not isinstance(headers, dict):
        return []
    out = []
    for k, v in headers.items():
        for item in (v if isinstance(v, (list, tuple)) else [v]):
            out.append((str(k), str(item)))
    return out


def _bytes(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, io.BytesIO):
        return body.getvalue()
    if isinstance(body, list) and all(isinstance(b, (bytes, str)) for b in body):
        return b"".join(b.encode() if isinstance(b, str) else b for b in body)
    raise _Skip(f"unreadable body of type {type(body).__name__}")


def _response(resp: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    if not isinstance(resp, dict):
        raise _Skip("the interaction has no response")
    if "status_code" in resp:  # vcrpy's older httpx format
        status, body = resp["status_code"], resp.get("content")
    else:
        st = resp.get("status")
        status = st.get("code") if isinstance(st, dict) else st
        b = resp.get("body")
        body = b.get("string") if isinstance(b, dict) else b
    if not isinstance(status, int):
        raise _Skip("the response has no status code")
    return status, _pairs(resp.get("headers")), _bytes(body)


def _decoded(lib: Lib, status: int, headers: list[tuple[str, str]], body: bytes
             ) -> tuple[list[tuple[str, str]], bytes]:
    """The body as the client would read it: vcrpy stores it compressed when the server sent
    it so; decoding here (with the library's own decoders) means a body that cannot be
    decoded is skipped, instead of reaching the live path as a transport failure."""
    enc = [(k, v) for k, v in headers if k.lower() == "content-encoding"]
    rest = [(k, v) for k, v in headers if k.lower() not in _WIRE_HEADERS
            and k.lower() != "content-encoding"]
    if not enc or not body:
        return rest, body
    m = lib.module
    try:
        return rest, bytes(m.Response(status, headers=enc, stream=m.ByteStream(body)).read())
    except Exception as exc:
        raise _Skip(f"cannot decode its {enc[0][1]} body ({exc})") from None


def _note_credentials(report: ImportReport, redactor: Redactor, req_headers: list[tuple[str, str]],
                      resp_headers: list[tuple[str, str]], uri: str) -> None:
    for k, _ in req_headers:
        if redactor.secret(k):
            report.note_redacted(f"request header {k.lower()}")
    for k, _ in resp_headers:
        if redactor.secret(k, response=True):
            report.note_redacted(f"response header {k.lower()}")
    for k, _ in urllib.parse.parse_qsl(urllib.parse.urlsplit(uri).query,
                                       keep_blank_values=True):
        if redactor.secret_query(k):
            report.note_redacted(f"query parameter {k}")


def convert(doc: dict[str, Any], report: ImportReport, redactor: Redactor,
            tape: Cassette) -> None:
    """Record every interaction of ``doc`` into the cassette block in force."""
    libs = available()
    if not libs:
        raise ConfigurationError("importing HTTP recordings needs httpx or httpx2: "
                                 "pip install 'dejacache[httpx]'")
    # (either library keys a request alike: the key is built from the request's data)
    lib = next((x for x in libs if x.name == "httpx"), libs[0])
    m = lib.module
    eff = current()
    for i, it in enumerate(doc.get("interactions") or []):
        name = "http"
        try:
            req = it.get("request") if isinstance(it, dict) else None
            if not isinstance(req, dict) or not req.get("uri") or not req.get("method"):
                raise _Skip("the interaction has no request method and uri")
            uri = str(req["uri"])
            url = urllib.parse.urlsplit(uri)
            if url.scheme not in ("http", "https"):
                raise _Skip(f"not an HTTP request ({uri[:60]})")
            req_headers = _pairs(req.get("headers"))
            headers = {k.lower(): v for k, v in req_headers}
            name = detect(url.hostname or "", url.path, headers).endpoint(url.hostname or "",
                                                                          url.path)
            if headers.get("content-encoding"):
                raise _Skip(f"its request body is {headers['content-encoding']}-encoded")
            status, resp_headers, raw = _response(it.get("response"))
            resp_clean, body = _decoded(lib, status, resp_headers, raw)
            request = m.Request(
                str(req["method"]).upper(), uri, content=_bytes(req.get("body")),
                headers=[(k, v) for k, v in req_headers if k.lower() not in _WIRE_HEADERS],
            )
        except _Skip as why:
            report.skipped.append(Skipped(i, name, str(why)))
            continue

        def send(request: Any, status: int = status, headers: Any = resp_clean,
                 body: bytes = body) -> Any:
            # The network, as vcrpy saw it answer.
            return m.Response(status, headers=headers, stream=m.ByteStream(body),
                              request=request)

        before = tape.new_entries
        resp = handle_sync(lib, eff, request, send, Options())
        try:
            resp.read()  # a stream is stored once it has been read to its end
        finally:
            resp.close()
        if tape.new_entries > before:
            report.converted.append(Converted(i, name))
            _note_credentials(report, redactor, req_headers, resp_headers, uri)
        else:  # pragma: no cover - the record path stores every complete answer
            report.skipped.append(Skipped(i, name, "the recording path did not store it"))
