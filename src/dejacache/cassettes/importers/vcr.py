"""vcrpy / pytest-recording cassettes: each interaction replayed through the live HTTP path.

A vcrpy cassette holds ``interactions``, each a ``request`` (method, uri, body, headers as
name -> list) and a ``response`` (status code and message, headers, ``body.string`` as text or
``!!binary`` bytes; older httpx recordings used ``status_code`` and ``content``). vcrpy's
httpx stub keeps the body as it came off the wire, so a gzip answer is stored compressed with
its ``content-encoding`` header; a streamed answer (``stream=True``) is one
``text/event-stream`` body. Serializers that keep JSON bodies parsed are read too
(``_bodies``).

The import runs in two steps. ``read`` turns every interaction into a request and the answer
vcrpy saw, or a reason to skip it; it decodes bodies within the file's ``InflateBudget`` and
refuses the whole file (``CassetteError``) past it, before anything is written. ``record``
then hands each request to the transport's ``handle_sync`` inside the import's record block,
with the recorded answer standing in for the network. The key, the provider's call name, id
aliasing across turns, SSE splitting into events and the stored shape are therefore exactly
those of a live call, and a recorded stream replays as a stream. Request headers are neither
stored nor keyed by that path (``Options(headers=False)``: vcrpy never matched them, so the
moved suite keeps its rule; a re-recorded call is keyed with them); the credentials among
them are counted in the report.
"""

from __future__ import annotations

import dataclasses
import pathlib
import urllib.parse
from collections.abc import Mapping
from typing import Any

from ...errors import CassetteError
from ...http._libs import Lib, available, plain
from ...http.providers import detect
from ...http.transport import Options, handle_sync
from ...scope import current
from ..redact import Redactor
from ..store import Cassette
from ._bodies import (
    Unreadable,
    codings,
    decode,
    gzipped,
    is_placeholder,
    media_type,
    request_body,
    response_body,
    sniff,
)
from ._limits import InflateBudget, OverBudget
from .report import Converted, ImportReport, Skipped

__all__ = ["Exchange", "library", "read", "record"]

# Recomputed by the HTTP library from the body it is given (vcrpy kept the wire's values).
_WIRE_HEADERS = frozenset({"content-length", "transfer-encoding", "host", "connection",
                           "content-encoding"})


@dataclasses.dataclass(frozen=True, slots=True)
class Exchange:
    """One interaction, ready to record: the request and the answer the client read."""

    index: int
    name: str
    request: Any
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    recorded: tuple[list[tuple[str, str]], list[tuple[str, str]]]  # both sides' headers
    uri: str


def library() -> Lib:
    """The HTTP library the recording is replayed through (any of them keys a request alike:
    the key is built from the request's data). Without httpx or httpx2, dejacache's own
    model, as ``requests`` and ``urllib3`` calls are recorded there: a suite whose tools use
    only ``requests`` moves from vcrpy with nothing more installed."""
    libs = available()
    if not libs:
        return plain()
    return next((x for x in libs if x.name == "httpx"), libs[0])


def _pairs(headers: Any, side: str) -> list[tuple[str, str]]:
    """vcrpy headers (name -> list of values, or name -> value) as pairs; a value kept as
    bytes (vcrpy's urllib3 stub wrote botocore's that way) read as its text."""
    if headers is None:
        return []
    if not isinstance(headers, Mapping):
        raise Unreadable(f"its {side} headers are a {type(headers).__name__}, not a mapping")
    out = []
    for k, v in headers.items():
        for item in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(item, bytes):  # urllib3's stub (boto3, requests) kept raw values
                try:
                    item = item.decode()
                except UnicodeDecodeError:
                    item = item.decode("latin-1")  # HTTP/1.1's own header charset
            if not isinstance(k, str) or isinstance(item, bool) \
                    or not isinstance(item, (str, int, float)):
                raise Unreadable(f"its {side} header {str(k)[:40]!r} is not text")
            out.append((k, str(item)))
    return out


def _raw(pairs: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    # Bytes, so a header httpx would refuse to encode as ASCII reaches it as recorded (vcrpy
    # wrote what httpx had decoded, as UTF-8 when it was not ASCII).
    return [(k.encode(), v.encode()) for k, v in pairs if k.lower() not in _WIRE_HEADERS]


def _status(resp: Mapping[str, Any]) -> int:
    st = resp.get("status_code") if "status_code" in resp else resp.get("status")
    code = st.get("code") if isinstance(st, Mapping) else st
    if not isinstance(code, int) or isinstance(code, bool) or not 100 <= code <= 599:
        raise Unreadable("the response has no status code")
    return code


def _target(it: Any) -> tuple[Mapping[str, Any], str, str, urllib.parse.SplitResult]:
    req = it.get("request") if isinstance(it, Mapping) else None
    if not isinstance(req, Mapping) or not req.get("uri") or not req.get("method"):
        raise Unreadable("the interaction has no request method and uri")
    uri, method = req["uri"], req["method"]
    if not isinstance(uri, str) or not isinstance(method, str):
        raise Unreadable("its request method and uri are not text")
    try:
        url = urllib.parse.urlsplit(uri)
        url.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise Unreadable(f"its uri is not a URL ({uri[:60]})") from None
    if url.scheme not in ("http", "https"):
        raise Unreadable(f"not an HTTP request ({uri[:60]})")
    return req, method, uri, url


def _answer(resp: Any, budget: InflateBudget) -> tuple[int, list[tuple[str, str]], bytes]:
    """The status, headers and body the client read. A Content-Type or Content-Encoding
    that the suite blanked (``**REDACTED**``) is read from the bytes instead (``sniff``), so
    the answer is stored as a fresh recording of it would be: JSON parsed, a stream as its
    events, usage and model read."""
    if not isinstance(resp, Mapping):
        raise Unreadable("the interaction has no response")
    status = _status(resp)
    headers = _pairs(resp.get("headers"), "response")
    given = next((v for k, v in headers if k.lower() == "content-type"), "")
    ctype = media_type(given)
    body, as_sent = response_body(resp, ctype)
    if as_sent and body:
        named = [v for k, v in headers if k.lower() == "content-encoding"]
        applied = codings(v for v in named if not is_placeholder(v))
        if not applied and any(is_placeholder(v) for v in named) and gzipped(body):
            applied = ["gzip"]  # blanked, but the bytes say gzip
        body = decode(body, applied, budget)
    if not ctype and (found := sniff(body)):
        headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
        headers.append(("content-type", found))
    return status, headers, body


def _one(lib: Lib, i: int, it: Any, budget: InflateBudget) -> Exchange:
    req, method, uri, url = _target(it)
    host = url.hostname or ""
    req_headers = _pairs(req.get("headers"), "request")
    headers = {k.lower(): v for k, v in req_headers}
    name = detect(host, url.path, headers).endpoint(host, url.path)
    try:
        content = request_body(req, media_type(headers.get("content-type", "")))
        coding = headers.get("content-encoding")
        if coding and (not is_placeholder(coding) or gzipped(content)):
            raise Unreadable(f"its request body is {coding}-encoded")
        status, resp_headers, body = _answer(it.get("response"), budget)
        try:
            request = lib.module.Request(method.upper(), uri, content=content,
                                         headers=_raw(req_headers))
            answer_headers = _raw(resp_headers)
        except Exception as exc:  # httpx's InvalidURL and friends: no one base class
            raise Unreadable(f"{lib.name} cannot build its request ({exc})") from None
    except Unreadable as why:
        why.name = name  # skipped under the name a live call would have
        raise
    return Exchange(i, name, request, status, answer_headers, body,
                    (req_headers, resp_headers), uri)


def read(doc: Mapping[str, Any], lib: Lib, source_size: int, path: pathlib.Path
         ) -> list[Exchange | Skipped]:
    """Every interaction of ``doc`` as an ``Exchange``, or ``Skipped`` with the reason.
    ``CassetteError`` if its bodies inflate past the file's budget."""
    budget = InflateBudget(source_size)
    out: list[Exchange | Skipped] = []
    for i, it in enumerate(doc.get("interactions") or []):
        try:
            out.append(_one(lib, i, it, budget))
        except Unreadable as why:
            out.append(Skipped(i, why.name, str(why)))
        except OverBudget as exc:
            raise CassetteError(f"interaction #{i}: {exc}", path=path) from None
    return out


def _note_credentials(report: ImportReport, redactor: Redactor, ex: Exchange) -> None:
    sent, received = ex.recorded
    for k, _ in sent:
        if redactor.secret(k):
            report.note_redacted(f"request header {k.lower()}")
    for k, _ in received:
        if redactor.secret(k, response=True):
            report.note_redacted(f"response header {k.lower()}")
    for k, _ in urllib.parse.parse_qsl(urllib.parse.urlsplit(ex.uri).query,
                                       keep_blank_values=True):
        if redactor.secret_query(k):
            report.note_redacted(f"query parameter {k}")


def record(plan: list[Exchange | Skipped], lib: Lib, report: ImportReport,
           redactor: Redactor, tape: Cassette) -> None:
    """Record every exchange of ``plan`` into the cassette block in force."""
    m = lib.module
    eff = current()
    for ex in plan:
        if isinstance(ex, Skipped):
            report.skipped.append(ex)
            continue

        def send(request: Any, ex: Exchange = ex) -> Any:
            # The network, as vcrpy saw it answer.
            return m.Response(ex.status, headers=ex.headers, stream=m.ByteStream(ex.body),
                              request=request)

        before = tape.new_entries
        resp = handle_sync(lib, eff, ex.request, send, Options(headers=False))
        try:
            resp.read()  # a stream is stored once it has been read to its end
        finally:
            resp.close()
        if tape.new_entries > before:
            report.converted.append(Converted(ex.index, ex.name))
            _note_credentials(report, redactor, ex)
        else:  # pragma: no cover - the record path stores every complete answer
            report.skipped.append(Skipped(ex.index, ex.name, "the recording path did not "
                                          "store it"))
