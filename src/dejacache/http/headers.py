"""Which request headers change the answer, and so belong to an HTTP key: pure rules.

A request header is, in this order:

1. **left out** when its name is written in ``volatile=`` (or ``DEJACACHE_VOLATILE``), or it
   is transport or telemetry (:data:`TRANSPORT`, :data:`TRANSPORT_PREFIXES`: the client's
   name and version, tracing, dates, request ids, framing, retry counters, idempotency keys),
   unless ``volatile=["!NAME"]`` keys it after all;
2. **identity** when it says who is asking: a credential name in any spelling
   (``Authorization``, ``Cookie``, ``X-Api-Key``, ``api-key``, ``X-Goog-Api-Key``,
   ``X-Auth-Token``...), a name made of credential words (``X-RapidAPI-Key``,
   ``Ocp-Apim-Subscription-Key``, ``PRIVATE-TOKEN``, ``X-Hub-Signature``), the account
   headers ``OpenAI-Organization``/``OpenAI-Project``, or any header whose value is
   secret-shaped. Identity never enters a key as it is: the request carries one keyed digest
   of all of it (``identities.py``), which a file cannot be turned back into. On a
   provider's own endpoints the API key is a *role*, not an identity (a recording made with a
   real key replays under CI's placeholder), and is left out; the account headers stay an
   identity, mapped one to one like any (``identities.py``: another org in CI replays a
   recording made under one; none where the recording has one misses);
3. **keyed as it is** otherwise: what the body is (``Content-Type``'s media type and
   parameters, such as a charset, without the multipart boundary or a UTF-8 charset), content
   negotiation (``Accept``, ``Accept-Language``,
   ``Range``, ``If-None-Match``...), API versions and betas (``anthropic-version``,
   ``anthropic-beta``, ``openai-beta``, ``X-GitHub-Api-Version``...), and any header this
   module does not know, since a miss is safe and a wrong answer is not. A value that asks
   for what the header's absence asks for (``Accept: */*``) is left out, so the same call
   keys alike from clients that send it and clients that do not.

Names are compared lower-cased, except that credential words are read from the client's own
spelling too (``X-AuthToken`` is ``auth`` + ``token``, ``x-authtoken`` one unknown word);
repeated headers are joined with ``", "`` in order.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Iterable
from typing import Final, NamedTuple

from .._secrets import (
    SENSITIVE_HEADERS,
    find_secrets,
    is_secret_name,
    is_secret_query,
    may_be_secret,
    name_forms,
)

__all__ = ["TRANSPORT", "TRANSPORT_PREFIXES", "KeyedHeaders", "classify", "cookie_pairs",
           "credential_values", "header_params", "is_credential", "is_setting", "quotable",
           "spelled_names", "split_content_type"]

#: Request headers that describe the connection, the client or the trace, never the question.
TRANSPORT: Final = frozenset({
    # the wire and the connection
    "host", "content-length", "transfer-encoding", "connection", "keep-alive",
    "te", "trailer", "upgrade", "expect", "accept-encoding", "proxy-connection", "via",
    "cache-control", "pragma", "origin", "referer", "forwarded",
    # the client
    "user-agent", "x-goog-api-client", "x-client-name", "x-client-version", "x-amz-user-agent",
    # dates, request ids, retries, idempotency
    "date", "x-amz-date", "x-amz-content-sha256", "amz-sdk-invocation-id", "amz-sdk-request",
    "x-request-id", "request-id", "x-correlation-id", "idempotency-key", "x-idempotency-key",
    "x-retry-count",
    # tracing
    "traceparent", "tracestate", "baggage", "sentry-trace", "x-amzn-trace-id",
    "x-cloud-trace-context", "x-trace-id", "x-span-id", "uber-trace-id",
    # a WebSocket handshake's per-connection nonce and framing
    "sec-websocket-key", "sec-websocket-extensions",
    # an MCP session's id: assigned by the server, echoed by the client, says nothing asked
    "mcp-session-id",
})
#: Families of the same (SDK telemetry: ``x-stainless-retry-count``, ``x-fern-sdk-version``).
TRANSPORT_PREFIXES: Final = ("x-stainless-", "x-fern-", "x-b3-", "x-datadog-", "x-forwarded-",
                             "sec-fetch-", "sec-ch-", "x-amz-sdk-", "x-ms-client-")

# Words that make a header name a credential (``x-rapidapi-key``, ``private-token``,
# ``X-AuthToken``, ``X-User-Jwt``, ``X-Pass``, ``X-Otp``, ``X-Pin``, ``X-Sign``): header names
# describe their value, so a name made of these words carries who is asking (a one-time code,
# a PIN and a request's signature too: each proves who sent it). A setting under such a name
# (``X-Pass-Through: 1``) is keyed as a digest, never stood in for (``is_setting``). Words,
# not substrings: ``X-Pinned-Version`` and ``X-Design`` are not made of them.
_CREDENTIAL_WORDS: Final = frozenset({
    "auth", "authorization", "authentication", "token", "key", "apikey", "secret", "password",
    "passwd", "pass", "passphrase", "passcode", "pwd", "userpass", "credential", "credentials",
    "cookie", "session", "signature", "sign", "sig", "hmac", "bearer", "jwt", "otp", "totp",
    "pin",
})


# Values that ask for what the header's absence asks for (RFC 9110: no ``Accept`` accepts any
# media type): requests, httpx and aiohttp send ``Accept: */*``, urllib sends none, and the
# same call must key alike from any client.
_AS_ABSENT: Final = {"accept": "*/*", "accept-language": "*", "accept-charset": "*"}


class KeyedHeaders(NamedTuple):
    """A request's headers as a key takes them: ``plain`` (name -> value, keyed as they are)
    and ``identity`` (``(name, value)`` pairs, keyed only as a digest), both sorted by name."""

    plain: dict[str, str]
    identity: tuple[tuple[str, str], ...]


@functools.lru_cache(maxsize=1024)
def _kind(raw: str) -> str:
    """``"transport"``, ``"identity"`` or ``"plain"`` for a header name as the client spelled
    it, before the user's rules and the value's shape are looked at. The spelling matters:
    ``X-AuthToken`` says ``auth`` and ``token`` in its capitals, which ``x-authtoken`` no
    longer does."""
    name = raw.lower()
    if name in TRANSPORT or name.startswith(TRANSPORT_PREFIXES):
        return "transport"
    forms = name_forms(raw)
    if is_secret_name(raw) or not forms.isdisjoint(SENSITIVE_HEADERS):
        return "identity"
    if any(not _CREDENTIAL_WORDS.isdisjoint(f.split("_")) for f in forms):
        return "identity"
    return "plain"


def is_credential(raw: str) -> bool:
    """Whether a header named ``raw`` (as its sender spelled it) carries who is asking, by
    its name alone: the one rule of a request's identity and of the response headers a
    store or cassette masks (a response's ``X-Hub-Signature`` or ``X-Auth`` was kept in plain
    text, judged by the credential-name list without the words a request's was read by)."""
    return _kind(raw) == "identity"


#: A credential's part shorter than this (``Bearer``, ``Basic``) is a scheme, not a secret:
#: hidden wherever it appears, it would hide ordinary words.
_SHORTEST_SECRET: Final = 8
# What parts a credential's value: spaces (``Bearer KEY``), and the control characters an
# HTTP library refuses it for, quoting it escaped (h11: "Illegal header value b'KEY\x00'").
_PARTS: Final = re.compile(r"[\s\x00-\x1f\x7f]+")


def is_setting(value: str) -> bool:
    """Whether ``value``, under a credential's name, is no credential: shorter than a secret
    can be, or one word of letters (``theme=dark``, ``consent=accepted``, ``X-Token-Limit:
    100``, a ``?key=color`` sort key). Such a value says what is asked, not who asks: it is
    never hidden from answers (it would hide that word in every answer) and never stands for
    another machine's value (``identities.py``)."""
    return len(value) < _SHORTEST_SECRET or value.isalpha()


def credential_values(headers: Iterable[tuple[str, str]],
                      query: Iterable[tuple[str, str]] = (), body: Iterable[str] = ()
                      ) -> list[str]:
    """The credentials a request carries, as text that may be found quoted elsewhere (an
    upstream's error answer echoing the key, an exception's message): its credential
    headers' values (:func:`is_credential`) parted as :func:`quotable` parts them, its
    credential query parameters' values whole, and ``body``, its body's
    (``bodies.credentials_in``)."""
    return quotable([(n, v) for n, v in headers if is_credential(n)],
                    [*(v for n, v in query if is_secret_query(n)), *body])


def quotable(pairs: Iterable[tuple[str, str]], whole: Iterable[str] = ()) -> list[str]:
    """Credentials as an answer or a message may quote them: each value of ``pairs``
    (``(name, value)``) and each of its words (``Bearer KEY``: the key; a key read with a
    NUL, which an HTTP library refuses quoting it escaped), a cookie's value without its name
    (``sid=KEY``: the key), each of ``whole`` as it is; none shorter than a secret can be,
    but a Basic password, which is one whatever its length (``_core.spellings`` finds one
    under 8 characters only as a whole word); longest first, so a value holding another is
    replaced whole."""
    found: set[str] = set(whole)
    passwords: set[str] = set()
    for name, value in pairs:
        words = _PARTS.split(value)
        decoded = _basic_decoded(words)
        found.update((value, *words, *decoded))
        passwords.update(p for p in decoded[1:] if p)
        if name.lower() == "cookie":
            found.update(v for _, v in cookie_pairs(value) if not is_setting(v))
    return sorted((v for v in found if len(v) >= _SHORTEST_SECRET or v in passwords),
                  key=len, reverse=True)


def _basic_decoded(words: list[str]) -> tuple[str, ...]:
    """``Basic TOKEN``'s credentials as an answer may quote them decoded: ``user:password``
    and the password (an echo server answers the header decoded; the token alone left the
    password plain in the cassette)."""
    for i, word in enumerate(words[:-1]):
        if word.lower() == "basic":
            try:
                text = base64.b64decode(words[i + 1], validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                return ()
            _user, colon, password = text.partition(":")
            return (text, password) if colon else ()
    return ()


def _joined_kind(spellings: set[str]) -> str:
    """The kind of one lower-cased name sent under several spellings: identity if any spelling
    says so (a name is transport or not by its lower case alone, so that never differs)."""
    kinds = {_kind(raw) for raw in spellings}
    return "identity" if "identity" in kinds else kinds.pop()


@functools.lru_cache(maxsize=64)
def _role_name(name: str) -> bool:
    """A credential a provider's SDK sends on every call (the API key), not an account."""
    return name_forms(name).isdisjoint(SENSITIVE_HEADERS)


def classify(
    headers: Iterable[tuple[str, str]],
    *,
    provider: bool,
    volatile: frozenset[str] = frozenset(),
    keep: frozenset[str] = frozenset(),
) -> KeyedHeaders:
    """Split ``headers`` (any case, repeats allowed) by the rules of the module docstring.
    ``provider``: the request goes to a provider's own endpoint (its API key is a role);
    ``volatile``: names the user leaves out; ``keep``: names the user keys after all.

    An SDK sends the same headers call after call: the answer is remembered per exact list
    (14 µs for an OpenAI request's 17 headers, ~1 µs to look up)."""
    return _classify(tuple(headers), provider, volatile, keep)


@functools.lru_cache(maxsize=512)
def _classify(headers: tuple[tuple[str, str], ...], provider: bool, volatile: frozenset[str],
              keep: frozenset[str]) -> KeyedHeaders:
    joined: dict[str, list[str]] = {}
    spellings: dict[str, set[str]] = {}
    for raw, value in headers:
        name = raw.lower()
        joined.setdefault(name, []).append(value)
        spellings.setdefault(name, set()).add(raw)
    plain: dict[str, str] = {}
    identity: list[tuple[str, str]] = []
    for name in sorted(joined):
        value = ", ".join(joined[name])
        if name == "content-type":
            value = _body_type(value)
        if name in volatile or _AS_ABSENT.get(name) == value:
            continue
        kind = _joined_kind(spellings[name])
        if kind == "transport" and name not in keep:
            continue
        if kind == "plain" and may_be_secret(value) and next(find_secrets(value), None):
            kind = "identity"  # a secret-shaped value under a name we did not know
        if kind == "identity":
            if not (provider and _role_name(name)):
                identity.append((name, value))
            continue
        plain[name] = value
    return KeyedHeaders(plain, tuple(identity))


# One ``; name=value`` parameter of a header (a quoted value may hold ``;`` and ``\"``).
_PARAM = re.compile(r'\s*;\s*([^\s=;"]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]*))\s*')
_UNESCAPE = re.compile(r"\\(.)")
# The charset a body without one is read in (JSON is UTF-8, RFC 8259) and that clients add or
# not (aiohttp's ``text/plain; charset=utf-8``): asked either way, the same question.
_UTF8 = frozenset({"utf-8", "utf8"})
_BOUNDARY = re.compile(r'(?i);?\s*boundary=(?:"[^"]*"|[^;\s]*)')


def split_content_type(value: str) -> tuple[str, dict[str, str]]:
    """``multipart/form-data; boundary="x"`` -> ``("multipart/form-data", {"boundary": "x"})``
    (a header whose parameters do not parse has none)."""
    mime, _, rest = value.partition(";")
    params = header_params(";" + rest) if rest else {}
    return mime.strip().lower(), params or {}


def header_params(text: str) -> dict[str, str] | None:
    """Every ``; name=value`` of a header after its first token, names lower-cased; None when
    the text is not all parameters or a name repeats."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        m = _PARAM.match(text, pos)
        if m is None:
            return None
        name = m.group(1).lower()
        if name in out:
            return None
        quoted = m.group(2)
        out[name] = _UNESCAPE.sub(r"\1", quoted) if quoted is not None else m.group(3)
        pos = m.end()
    return out


def _body_type(value: str) -> str:
    """``Content-Type`` as a key holds it: what the body is, its media type and parameters
    (``charset=latin-1`` makes the same bytes other text: ``caf\xc3\xa9`` is "café" in
    UTF-8, "cafÃ©" in Latin-1, and both once shared a key), without the multipart
    ``boundary`` (random per request, framing) or a UTF-8 charset (``_UTF8``)."""
    mime, sep, rest = value.partition(";")
    mime = mime.strip().lower()
    if not sep:
        return mime
    params = header_params(";" + rest)
    if params is None:  # unreadable: kept whole but for a boundary, never read loosely
        return _BOUNDARY.sub("", value).strip()
    kept = []
    for k, v in sorted(params.items()):
        if k == "charset":
            v = v.lower()
            if v in _UTF8:
                continue
        if k != "boundary":
            kept.append(f"; {k}={v}")
    return mime + "".join(kept)


def cookie_pairs(value: str) -> list[tuple[str, str]]:
    """``a=1; b=2`` as ``[("a", "1"), ("b", "2")]`` (a bare ``flag`` as ``("flag", "")``)."""
    out = []
    for part in value.split(";"):
        name, _, val = part.strip().partition("=")
        if name:
            out.append((name.strip(), val.strip()))
    return out


def spelled_names(raw: list[tuple[bytes, bytes]], items: list[tuple[str, str]]
             ) -> list[tuple[str, str]]:
    """``items`` (httpx's ``multi_items()``: lower-cased names) with each name as its sender
    wrote it (``headers.raw``, same order): ``X-AuthToken`` is a credential by its capitals,
    which ``x-authtoken`` has lost (a request's or a response's). Keys and stored headers
    lower-case names again, so only that decision changes; a name that does not lower-case
    to its item (not ASCII) stays as ``multi_items`` gave it. ~1 us for an SDK's 17
    headers."""
    if len(raw) != len(items):
        return items
    out = []
    for (name, _), (low, value) in zip(raw, items, strict=True):
        spelled = name.decode("latin-1")
        out.append((spelled if spelled.lower() == low else low, value))
    return out
