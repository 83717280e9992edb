"""One HTTP exchange as data: the request's canonical form and key, the stored answer.

Pure functions over bytes and dicts (no sockets): the transports in ``transport.py`` drive them.

Stored answer (a plain JSON dict, so cassettes stay readable and replays decode fast)::

    {"status": 200, "headers": [["content-type", "application/json"], ...],
     "json": {...} | "text": "..." | "bytes": b"...",       # a whole body, or
     "events": [[0.012, "data: {...}\\n\\n"], ...],         # an SSE or NDJSON stream, or
     "events": [[0.0, {"headers": [...], "payload": "{...}"}], ...],   # an AWS eventstream
     "error": {"type": "ReadTimeout", "message": "..."},   # a transport failure
     "ids": ["call_1", ...], "usage": {...}, "model": "..."}

An NDJSON body (Ollama's streams) is kept as one event per line, so it replays line by line.

Every response header is kept (protocols read them: an MCP session id, pagination ``Link``,
``ETag``, ``Location``, rate limits), except the three that describe the wire body rather than
the decoded body we keep (a body that could not be decoded is kept as it came, with its
``Content-Encoding``: :func:`opaque_value`). Credentials and cookies among them (named as a
request's identity headers are, ``headers.is_credential``, and secret-shaped values) are
masked before anything is stored, and a replay never hands a masked one back. Volatile ones
(``VOLATILE_HEADERS``: dates, request ids, rate-limit counters) are kept but never compared
(:func:`comparable`). Request headers that change the answer are keyed (``headers.py``); who
is asking is keyed as one digest (``identities.py``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import orjson

from .._core import volatile as _vol
from .._core.cache_fields import strip as strip_cache_fields
from .._core.spellings import Spellings, spellings
from .._secrets import (
    AUTH_QUERY,
    PLACEHOLDER,
    SESSION_QUERY,
    credential_token,
    is_auth_query,
    is_secret_name,
    is_secret_query,
    mask,
    name_forms,
)
from ..cassettes.redact import Redactor
from ..errors import SerializationError
from ..keys import (
    DEFAULT_VOLATILE,
    canonical_json,
    digest,
    kept_out,
    telemetry_names,
    volatile_spellings,
)
from . import eventstream
from .aliases import AliasTable
from .bodies import body_for_key, parsed_since_legacy
from .headers import credential_values, is_credential
from .providers import Provider
from .sse import event_bytes, event_data, is_ndjson, ndjson_events

__all__ = [
    "SECRET_QUERY",
    "VOLATILE_HEADERS",
    "body_bytes",
    "canonical_request",
    "comparable",
    "error_value",
    "opaque_value",
    "query_identity",
    "replay_headers",
    "response_value",
    "storable",
    "stored_headers",
    "unechoed",
    "unquoted",
]

# The wire body's framing: we keep the body decoded, and a replay lets the library frame it.
_WIRE_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})

#: Response headers that change on every call while the answer does not: kept (an SDK reads
#: ``x-request-id`` into ``_request_id``), never compared (:func:`comparable`).
VOLATILE_HEADERS = frozenset({
    "date", "age", "expires", "x-request-id", "request-id", "x-amzn-requestid",
    "x-amz-request-id", "x-amzn-trace-id", "x-correlation-id", "traceparent", "tracestate",
    "cf-ray", "openai-processing-ms", "x-envoy-upstream-service-time", "server-timing",
    "retry-after", "retry-after-ms", "x-cloud-trace-context",
    "x-amzn-bedrock-invocation-latency",
})
# Families of counters a provider sends with every answer (x-ratelimit-remaining-requests...).
_VOLATILE_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "ratelimit-")
# A body under this many bytes is keyed whole rather than by parts (``keys.canonical_json``,
# the same bytes): the parts' memos pay on long conversations that resend their history,
# and cost more than they save below it. Measured per request, 3 to 63 messages, plain and
# with nulls, URLs and secret-shaped words: 280 B 38 vs 7.5 us, 2 KB 70 vs 14, 10 KB 130 vs
# 30, 19 KB 116 vs 37 (by parts vs whole); a replayed chat call through the proxy keys in
# ~25 us less.
_PARTS_FROM = 16 * 1024

# Secret-shaped values: the cassettes' own rule, so a header hidden in a file is hidden in
# every store too (credential names: the request headers' rule, ``headers.is_credential``).
_HIDE = Redactor()

# Query parameters that authenticate (Azure/Gemini keys, signed URLs): never in the key as
# they are. Like the Authorization header, they are who is asking: on a provider's endpoint
# a role (left out, so a recording replays under another API key), elsewhere an identity
# (``query_identity``: one digest per value, so alice's ``?access_token=`` and bob's key
# apart). Other credential parameters (``?code=``, ``?password=``) change the answer: they
# are masked.
SECRET_QUERY = AUTH_QUERY


@functools.lru_cache(maxsize=256)
def volatile_for(provider: str, extra: tuple[str | re.Pattern[str], ...], base: frozenset[str]
                 ) -> tuple[frozenset[str], tuple[_vol.Path, ...], tuple[re.Pattern[str], ...],
                            frozenset[str], frozenset[str]]:
    """Names, paths, patterns, kept names (``!NAME``) and telemetry ids for a request (the
    names hold the ids too, which a header is by name; the body drops them only where
    telemetry lives: ``keys.telemetry_names``): paths are rooted at
    the canonical request (``body.messages[*].content``, ``headers.x-nonce``), and one that
    does not start at ``method``, ``path``, ``query``, ``headers`` or ``body`` is read under
    ``body``, so ``messages[*].content`` works too. A kept name is keyed although dejacache
    leaves it out by default (a transport header, a default volatile name)."""
    spec = _vol.parse(extra)
    names = volatile_spellings(kept_out(DEFAULT_VOLATILE | base | spec.names, spec.keep))
    tele = telemetry_names(names, spec.keep)
    # Header names are compared lower-cased (``headers.classify``).
    keep = frozenset(k.lower() for k in spec.keep)
    return (names | tele, _vol.under(spec.paths, _vol.REQUEST_ROOTS, "body"), spec.patterns,
            keep, tele)


def _body_for_key(body: bytes, content_type: str, aliases: AliasTable | None, *,
                  legacy: bool = False) -> Any:
    """The body as the canonical request holds it: JSON parsed, form and multipart bodies as
    their fields (credential fields masked), other text inline or by digest (``bodies.py``).
    ``legacy``: the form keys had before form and multipart bodies were parsed."""
    return body_for_key(body, content_type, aliases, legacy=legacy)


_auth_query = is_auth_query

#: A provider's API key as its SDKs put it in a query (Gemini's and Azure's ``?key=``).
ROLE_QUERY: Final = AUTH_QUERY - SESSION_QUERY


@functools.lru_cache(maxsize=256)
def caller_query(name: str) -> bool:
    """Whether a query parameter says who is asking even on a provider's endpoint, where the
    API key is a role: a session (``?sid=``) or a nested credential (``auth[token]``)."""
    return is_auth_query(name) and ROLE_QUERY.isdisjoint(name_forms(name))


def query_identity(query: Iterable[tuple[str, str]],
                   secret: Callable[[str], bool] = _auth_query) -> tuple[tuple[str, str], ...]:
    """The authenticating parameters of a query (those ``secret`` names) as identity pairs
    (``query:NAME``, name percent-encoded so an item's spelling stays one token), a repeated
    name's values joined in order with ``,`` (escaped in the values, so two spellings never
    join alike). An MCP server's URL is named by the same pairs (``mcp._wire``)."""
    found: dict[str, list[str]] = {}
    for k, v in query:
        if secret(k):
            found.setdefault(k, []).append(v.replace("\\", "\\\\").replace(",", "\\,"))
    if not found:
        return ()
    from urllib.parse import quote  # only for a query that carries a credential

    return tuple(sorted((f"query:{quote(k, safe='')}", ",".join(vs))
                        for k, vs in found.items()))


def _head(method: str, path: str, query: Iterable[tuple[str, str]],
          aliases: AliasTable | None, alias_path: bool) -> dict[str, Any]:
    """The method, path and query of a canonical request."""
    q: dict[str, Any] = {}
    for k, v in query:
        if _auth_query(k):
            continue  # who is asking: in the identity (``query_identity``), or a role
        if is_secret_query(k) and not is_secret_name(k):  # ``?code=``: secret only here
            v = mask(v)
        if k in q:
            prev = q[k]
            q[k] = [*prev, v] if isinstance(prev, list) else [prev, v]
        else:
            q[k] = v
    # Ids also come back in URLs (``GET /v1/responses/{id}`` polling a background response):
    # the path is keyed through the block's aliases like the body (``alias_path=False``: the
    # form keys had before, which recordings made then are found by).
    keyed_path = aliases.apply(path) if aliases is not None and alias_path else path
    data: dict[str, Any] = {"method": method, "path": keyed_path}
    if q:
        data["query"] = q
    return data


def canonical_request(
    method: str,
    path: str,
    query: Iterable[tuple[str, str]],
    body: bytes,
    content_type: str,
    provider: Provider,
    aliases: AliasTable | None,
    extra_volatile: tuple[str | re.Pattern[str], ...],
    substitutions: tuple[tuple[bytes, bytes], ...] = (),
    *,
    alias_path: bool = True,
    headers: Mapping[str, str] | None = None,
    identity: list[str] | None = None,
    legacy: bool = False,
    cache_fields: tuple[str, ...] = (),
) -> tuple[bytes, bool]:
    """Canonical JSON of a request (method, path, query without auth parameters, the request
    headers that change the answer, the caller's identity digest, body without volatile
    fields, credentials masked; provider ids in path and body aliased) and whether the body
    asks for a stream.

    ``headers``: the keyed headers (``headers.classify``); ``identity``: the caller's
    identity items, sorted (``NAME@SCOPE#DIGEST``: ``identities.py``). ``legacy``: the form
    keys had before request headers counted (no ``headers`` member, form and multipart
    bodies as text), which recordings made then are found by. ``cache_fields``: prompt-cache
    controls left out of the body (the form keys take: ``Provider.cache_fields``).

    The host is not part of it (the endpoint name carries the provider): a loopback test server
    gets a fresh port on every run, and the same call through a proxy should match.
    """
    data = _head(method, path, query, aliases, alias_path)
    b = _body_for_key(body, content_type, aliases, legacy=legacy)
    if cache_fields:
        b = strip_cache_fields(b, cache_fields)
    if b is not None:
        data["body"] = b
    if not legacy:
        data["headers"] = dict(headers or {})
    stream = provider.asks_stream(path, b)
    vol, paths, patterns, _, tele = volatile_for(provider.name, extra_volatile,
                                                 provider.volatile)
    # Credential-named body fields (``password``, ``client_secret``) are masked whatever else
    # the body holds (they once were only when a volatile field such as ``user`` was there).
    return canonical_json(data, volatile=vol, volatile_paths=paths, volatile_patterns=patterns,
                          function=provider.name, substitutions=substitutions,
                          fixed={"identity": identity} if identity else None,
                          by_parts=len(body) >= _PARTS_FROM, telemetry=tele), stream


def legacy_request(
    new: bytes,
    method: str,
    path: str,
    query: Iterable[tuple[str, str]],
    body: bytes,
    content_type: str,
    provider: Provider,
    aliases: AliasTable | None,
    extra_volatile: tuple[str | re.Pattern[str], ...],
    substitutions: tuple[tuple[bytes, bytes], ...] = (),
    *,
    headers: Mapping[str, str],
    identity: list[str] | None,
) -> bytes:
    """The form before request headers counted (``canonical_request(..., legacy=True)``) of
    the request whose new form is ``new``.

    Cut out of ``new`` when its bytes are laid out as expected: the members sort ``body`` <
    ``headers`` < ``identity`` < ``method`` < ``path`` < ``query``, and the headers, identity
    and head are written alone as they are inside ``new``; a long conversation is then
    canonicalised once per call, not twice (268 KB: ~0.7 ms each). Anything else (a ``None``
    mark that is not the body's, substitutions that span members) is written out in full.
    """
    if parsed_since_legacy(content_type):  # the body itself was keyed another way then
        return canonical_request(method, path, query, body, content_type, provider, aliases,
                                 extra_volatile, substitutions, legacy=True)[0]
    vol, paths, patterns, _, tele = volatile_for(provider.name, extra_volatile,
                                                 provider.volatile)
    kw: dict[str, Any] = {"volatile": vol, "volatile_paths": paths,
                          "volatile_patterns": patterns, "function": provider.name,
                          "substitutions": substitutions, "telemetry": tele}
    tail = canonical_json(_head(method, path, query, aliases, True), **kw)
    mid = canonical_json({"headers": dict(headers)},
                         fixed={"identity": identity} if identity else None, **kw)
    mark = b" " if new.endswith(b" ") else b""
    core = new[:-1] if mark else new
    if not tail.endswith(b" ") and not mid.endswith(b" "):
        suffix = mid[1:-1] + b"," + tail[1:]
        if core.endswith(suffix) and core[-len(suffix) - 1:-len(suffix)] in (b"{", b","):
            return core[:-len(suffix)] + tail[1:] + mark
    return canonical_request(method, path, query, body, content_type, provider, aliases,
                             extra_volatile, substitutions, legacy=True)[0]


def request_key(namespace: str, name: str, canonical: bytes) -> str:
    return digest(namespace, name, canonical)


def stored_headers(headers: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Every response header as ``[name, value]``, lower-cased, credentials masked.

    Masked by the name as the server spelled it, lower-cased only after: ``X-AccessToken``
    says ``access`` and ``token`` in its capitals, which ``x-accesstoken`` no longer does.
    Judged by the request headers' rule (``headers.is_credential``: ``Token``,
    ``X-Hub-Signature``, ``X-Auth``; not a body's, which spares ``token`` words); any other
    value has its secret-shaped parts masked."""
    text = _HIDE.text
    return [[text(k).lower(), PLACEHOLDER if is_credential(k) else text(v)]
            for k, v in headers if k.lower() not in _WIRE_HEADERS]


def unechoed(value: dict[str, Any], credentials: Sequence[str],
             wire: bytes | None = None) -> dict[str, Any]:
    """A stored answer without the credentials of the request it answers
    (``headers.credential_values``), wherever a string in it quotes one, in any spelling
    (``_core.spellings``: ``\\/``, ``\\u002B``, ``%2F``): a provider refusing a key
    quotes it ("Incorrect API key provided: KEY", the ``?key=`` of the URL), an event
    stream answered 200 may end in an error event that does, a debug endpoint echoes it; a
    key of no known shape under no credential name reached cassettes and stores as it was.
    Every recording driver stores every live answer through this, whatever its status (HTTP:
    :func:`response_value`, and :func:`error_value` for a transport failure; WebSocket: a
    refused handshake, and the windows of a session whose handshake carried credentials; MCP:
    every answer a session's live call stores, ``mcp._callers.Callers.unechoed``); replays
    never come here. ``wire``: the body bytes the answer was read from, looked at
    instead of the answer's own body (:func:`_quotes`).
    The caller still gets the answer as it came; a replay quotes the placeholder."""
    if not credentials:
        return value
    spelt = spellings(tuple(credentials))
    if not _quotes(value, spelt, wire):
        return value
    out: dict[str, Any] = _without(value, spelt)
    return out


def _quotes(value: dict[str, Any], spelt: Spellings, wire: bytes | None = None) -> bool:
    """Whether a string in ``value`` may hold one of the credentials ``spelt``: JSON
    escapes a string character by character, so a string holding one, written, holds it
    written (only with more backslashes, which a spelling absorbs). Looking through a
    WebSocket window node by node cost 68 us for 20 small text events and 170 us for 50
    audio deltas of 6.4 KB (5 s of audio); written once by orjson and searched, about 10 and
    120 us (orjson's writing alone: 3 and 60).

    Every live HTTP answer comes here, with the body it was read from (``wire``): a body
    without a backslash escapes nothing, so it spells every string of its JSON, text and
    events as they are, and is searched as it is (for each credential's anchor, which any
    spelling of it writes as it is); only its headers are written. Writing a 1 MB
    embeddings answer (floats) cost 1,400 us beside a record path of 12.5 ms; searching it,
    200 us. Text-heavy bodies escape their newlines, and are written: 1 MB of text, 150 us
    beside 800 us (searching it costs about as much); a 2 KB chat completion, 3 us beside
    310 us; a 200-event stream (events, no wire), 40 us beside ~6.5 ms. The spellings'
    patterns only run where an anchor is. An anchor is shorter than its key, and a shorter
    needle is searched slower: a 1 MB body of lines and links, written, took 234 us when the
    key alone was looked for, 313 us now (``benchmarks/bench_unechoed.py``); the others
    as before."""
    if wire is not None and b"\\" not in wire and not spelt.may_hold(wire):
        value = {"headers": value.get("headers")}
    try:
        written = orjson.dumps(value)
    except TypeError:  # (bytes, a body that was not text): looked through node by node
        return True
    return spelt.held(written)


def unquoted(body: bytes, headers: Sequence[tuple[str, str]],
             query: Sequence[tuple[str, str]] = ()) -> bytes:
    """``body`` with each spelling of the request's own credentials (the values of its
    credential ``headers`` and ``query`` parameters, as :func:`unechoed` finds them in its
    answer: ``headers.credential_values``) replaced by ``<credential:NAME>``, naming the
    header (``x-api-key``) or parameter (``query:key``) it stands for; the bytes as they
    are when none is there.

    A body quoting the key it is sent with (a tool call handing it on, a debug echo, a
    form field, a JWT-like blob in a JSON string) reached the canonical request, and so
    the cassette, as it was, under a name no rule calls secret. Replaced in the raw bytes,
    before the body is parsed, so JSON strings at any depth, text, form fields, multipart
    parts and bodies keyed by digest are all covered by one search. The token is what the
    key and the stored request hold: a replay with another key (CI's) quotes its own key,
    which becomes the same token, while its header is mapped onto the recording's as an
    identity (``identities.py``), so it still hits (on any machine: under a credential
    field's name the token keys as itself, ``_secrets.is_credential_token``, not as a
    per-machine mask); a body quoting another header keys apart. A body quoting none
    costs one substring search per credential and per base64 run of it
    (``Spellings.may_hold``, as :func:`_quotes` does for answers): one API key, 2 KB of
    JSON 2.3 us (a replayed call ~185 us), 200 KB 77 us (~1 ms)."""
    if not body:
        return body
    own = _own(tuple(headers), tuple(query))
    if own is None or not own.every.may_hold(body):
        return body
    text = body.decode("utf-8", "surrogateescape")
    for name, spelt in own.named:
        token = credential_token(name)
        # Split on the placeholder the body may hold already, so that only this
        # credential's replacements are renamed after it.
        text = PLACEHOLDER.join(spelt.replaced(part).replace(PLACEHOLDER, token)
                                for part in text.split(PLACEHOLDER))
    return text.encode("utf-8", "surrogateescape")


class _Own(NamedTuple):
    """A request's own credentials: ``every`` of them (whether a body may quote one), and
    each credential's by the name it came under, longest value first."""

    every: Spellings
    named: tuple[tuple[str, Spellings], ...]


@functools.lru_cache(maxsize=512)  # an SDK sends the same headers call after call
def _own(headers: tuple[tuple[str, str], ...], query: tuple[tuple[str, str], ...]
         ) -> _Own | None:
    found: dict[str, set[str]] = {}
    for name, value in headers:
        found.setdefault(name.lower(), set()).update(credential_values([(name, value)]))
    for name, value in query:
        vs = credential_values((), [(name, value)])
        if vs:
            from urllib.parse import quote  # only for a query that carries a credential

            found.setdefault(f"query:{quote(name, safe='')}", set()).update(vs)
    named = sorted(((n, sorted(vs)) for n, vs in found.items() if vs),
                   key=lambda nv: (-max(len(v) for v in nv[1]), nv[0]))
    if not named:
        return None
    every = spellings(tuple(sorted({v for _, vs in named for v in vs})))
    return _Own(every, tuple((n, spellings(tuple(vs))) for n, vs in named))


def _without(node: Any, spelt: Spellings) -> Any:
    if type(node) is str:
        return spelt.replaced(node)
    if type(node) is dict:
        return {k: _without(v, spelt) for k, v in node.items()}
    if type(node) is list:
        return [_without(v, spelt) for v in node]
    if type(node) is bytes:  # a body that was not text holds it as its UTF-8
        return spelt.replaced_bytes(node)
    return node


def replay_headers(stored: Iterable[list[str]]) -> list[tuple[str, str]]:
    """The headers a replayed answer carries: a masked credential is left out (a cookie jar
    would keep ``<REDACTED>`` and send it on)."""
    return [(k, v) for k, v in stored if v != PLACEHOLDER]


def is_volatile_header(name: str) -> bool:
    return name in VOLATILE_HEADERS or name.startswith(_VOLATILE_PREFIXES)


def comparable(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """A stored answer without its volatile headers: what "the same answer" compares."""
    headers = value.get("headers")
    if type(headers) is not list:
        return value
    return {**value, "headers": [h for h in headers if not (
        type(h) is list and h and type(h[0]) is str and is_volatile_header(h[0]))]}


def body_field(body: bytes, content_type: str) -> tuple[str, Any]:
    if "json" in content_type:
        try:
            return "json", orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            pass
    try:
        return "text", body.decode()
    except UnicodeDecodeError:
        return "bytes", body


def response_value(
    status: int,
    headers: Iterable[tuple[str, str]],
    content_type: str,
    provider: Provider,
    *,
    body: bytes | None = None,
    events: list[list[Any]] | None = None,
    credentials: Sequence[str] = (),
) -> dict[str, Any]:
    """The stored form of a live answer (``body`` whole, or its ``events``), without the
    ``credentials`` of the request it answers wherever it quotes them (:func:`unechoed`),
    whatever its status."""
    value: dict[str, Any] = {"status": status, "headers": stored_headers(headers)}
    parsed: Any = None
    if events is None and body:
        if eventstream.is_eventstream(content_type):
            events = _eventstream_events(body)
        elif status < 400 and is_ndjson(content_type):
            events = ndjson_events(body)
    if events is not None:
        value["events"] = events
        datas = [_event_json(ev) for _, ev in events]
    else:
        datas = []
        field, parsed = body_field(body or b"", content_type)
        value[field] = parsed
        if field != "json":
            parsed = None
    if status < 400:
        ids = provider.ids(parsed, datas)
        if ids:
            value["ids"] = ids
        usage = provider.usage(parsed, datas)
        if usage:
            value["usage"] = usage
        model = provider.model(parsed, datas)
        if model:
            value["model"] = model
    return unechoed(value, credentials, body) if credentials else value


def opaque_value(status: int, headers: Iterable[tuple[str, str]], provider: Provider,
                 raw: bytes, encoding: str, *, credentials: Sequence[str] = ()
                 ) -> dict[str, Any]:
    """An answer whose body could not be decoded (``codings.py``), as stored: its bytes as
    they came, not read as the JSON or stream its type says, and its ``Content-Encoding``,
    so a replay hands the client what the live call did. ``credentials``: as
    :func:`response_value` (found only where the bytes are not still compressed)."""
    value = response_value(status, headers, "", provider, body=raw, credentials=credentials)
    value["headers"].append(["content-encoding", encoding])
    return value


def _event_json(event: Any) -> Any:
    return event_data(event) if type(event) is str else eventstream.stored_json(event)


def _eventstream_events(body: bytes) -> list[list[Any]] | None:
    """A whole eventstream body as recorded events (no timing: it was read in one go), or
    None when it does not decode (damaged, truncated): it is then kept as bytes, whole, so a
    replay fails the way the live call did instead of serving messages that were not sent."""
    try:
        messages = eventstream.decode_all(body)
    except SerializationError:
        return None
    return [[0.0, eventstream.to_stored(m)] for m in messages]


def error_value(exc: BaseException, credentials: Sequence[str] = ()) -> dict[str, Any]:
    """A transport failure as stored, without the ``credentials`` of the request it failed
    (:func:`unechoed`): h11 refusing a key read from a file with its newline quotes it."""
    return unechoed({"error": {"type": type(exc).__name__, "message": str(exc)}}, credentials)


def body_bytes(value: Mapping[str, Any]) -> bytes:
    """The body of a stored answer as wire bytes (a stream's events joined)."""
    events = value.get("events")
    if events is not None:
        return b"".join([event_bytes(ev) for _, ev in events])
    if "json" in value:
        return orjson.dumps(value["json"])
    if "text" in value:
        return str(value["text"]).encode()
    raw = value.get("bytes", b"")
    return bytes(raw)


# 5xx, 408 and 429 are transient: a runtime cache that kept one would serve the failure
# forever (and the SDK's retry would hit it again). Sequenced stores (cassettes) keep them,
# in order, so a recorded retry replays as a retry.
_TRANSIENT = frozenset({408, 409, 429})


def storable(value: Mapping[str, Any], sequenced: bool) -> bool:
    if sequenced:
        return True
    if "error" in value:
        return False
    status = int(value.get("status", 0))
    return status < 500 and status not in _TRANSIENT
