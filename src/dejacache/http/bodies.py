"""How an HTTP request body enters the canonical request, and so the key and the stored request.

- **JSON** (a content type saying JSON, or none and a body starting with ``{`` or ``[``): the
  parsed value, provider ids aliased; the core then drops volatile fields and masks
  credential-named ones. An object repeating a key keeps its pairs in order
  (``_core/repeated_keys.py``). Under another type (``text/plain``) a body is text, as sent,
  unless it is JSON holding a credential field (:func:`_holds_credential`).
- **Form** (``application/x-www-form-urlencoded``): ``{"form": [{name: value}, ...]}``, the
  pairs decoded, in order, a repeated name kept each time. Each pair is a one-key dict so the
  core masks a credential name's value (``client_secret``, ``password``, ``refresh_token``)
  exactly as it masks a JSON body's field, ``substitute=`` included; names that are secret
  only as query parameters (``code``, ``key``, ``code_verifier``) are masked here, as the URL's
  are.
- **Multipart**: ``{"multipart": [{name: part}, ...]}``, one dict per part, in order; the random
  boundary is never in it. A plain field (``form-data; name="..."``, no other header) is its
  text; any other part is ``{"content": ..., "filename": ..., "content_type": ...,
  "headers": [...], "disposition": ...}`` with only what it has (``disposition``: the header as
  sent when it is not a plain ``form-data`` one, None when missing). Content is text up to
  ``INLINE_TEXT`` bytes, else (or binary) ``{"xxh3_128": ..., "size": ...}``. A part named like
  a credential has its content masked (a file's digest could be dictionary-attacked as well as
  its text); a plain credential field is left to the core, like a form's.
- **Anything else**, and a form or multipart body that does not parse: ``{"text": ...}`` up to
  ``INLINE_TEXT`` bytes (a multipart boundary replaced by ``BOUNDARY``), else its digest; the
  value of each credential line (``password: ...``, ``API_KEY=...``: ``_formtext``) masked
  as a JSON field's is. What stores and cassettes keep of such text is still masked
  (``_secrets.mask_text`` reads form and multipart text too).

``legacy=True`` is the body as keys had it before forms and multipart were parsed (a form as
``{"text": ...}``): recordings made then are found by recomputing that form.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson
import xxhash

from .. import _formtext
from .._core.repeated_keys import may_repeat, with_pairs
from .._secrets import (
    MASK_PREFIX,
    NAME_HINTS,
    held,
    held_kind,
    is_secret_name,
    is_secret_query,
    mask,
    pair_kind,
)
from .aliases import AliasTable
from .headers import header_params, split_content_type

__all__ = ["INLINE_TEXT", "body_for_key", "credentials_in", "parsed_since_legacy"]

#: Bodies (and parts) above this many bytes are keyed by digest instead of inline text
#: (nearest-miss diffs stay short).
INLINE_TEXT: Final = 4096

_FORM = "application/x-www-form-urlencoded"
# ``%`` not starting an escape: such a body is kept as text rather than decoded into one
# that another body (with ``%25``) also decodes to.
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
# orjson parses an integer outside [-2**63, 2**64) into a float, so 10**20 and 10**20 + 1
# would share a key; the shortest such integer (-9223372036854775809) has 19 digits. A body
# with a run that long is parsed again by the stdlib, which keeps every integer exact (and
# ``keys`` tags it as ``@cache`` does); a long digit run inside a string only costs that parse.
# The run is found by mapping every digit to ``0`` and searching: ~0.3 us for a 135-byte chat
# request, ~10 us for 5 KB (half an orjson.loads), where ``re`` ``[0-9]{19}`` took 10-20x that.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_RUN = b"0" * 19


def body_for_key(body: bytes, content_type: str, aliases: AliasTable | None, *,
                 legacy: bool = False) -> Any:
    """The body as the canonical request holds it (see the module docstring)."""
    if not body:
        return None
    head = body[:1]
    said = _says_json(content_type, legacy)
    if said or (said is None and head in (b"{", b"[")):
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            if data is None:  # ``null``: a value, which no body (None) must not key as
                return _text(body, content_type, legacy)
            if not legacy and may_repeat(body, data):
                data = with_pairs(body)
            elif _LONG_RUN in body.translate(_DIGITS_AS_ZERO):
                data = _exact_json(body)
            if aliases is None:
                return data
            return aliases.learn_sent(body, aliases.apply_json(body, data))
    elif said is False and head in (b"{", b"[") and _holds_credential(body):
        return body_for_key(body, "application/json", aliases)  # (see _holds_credential)
    if not legacy:
        mime, params = split_content_type(content_type)
        parsed: Any = None
        if mime == _FORM:
            parsed = _form(body)
        elif mime.startswith("multipart/") and params.get("boundary"):
            parsed = _multipart(body, params["boundary"].encode("latin-1", "replace"))
        if parsed is not None:
            return parsed
    return _text(body, content_type, legacy)


def credentials_in(body: bytes, content_type: str) -> list[str]:
    """The values ``body`` holds under credential names, at any depth (a JSON ``api_key``, a
    nested ``password``, a form's ``client_secret``, a multipart field's), by the rule keys
    mask them with: what an answer quoting the body (a validation error's ``"input"``) is
    stored without. Read only for a call that goes live: a 2 KB chat request ~12 us, a
    267 KB conversation ~0.9 ms (measured medians), beside a live call's round trip."""
    found: list[str] = []

    def take(leaf: Any) -> Any:
        found.append(str(leaf))
        return leaf

    def walk(node: Any, parent: str | None = None) -> Any:
        if type(node) is dict:
            for k, v in node.items():  # (a repeating object's pairs are under 0)
                kind = held_kind(k, v, is_secret_name) if type(k) is str else None
                held(kind, v, take, walk) if kind else walk(v, k)
        elif type(node) is list:
            kind = pair_kind(node, is_secret_name, parent)
            if kind:
                held(kind, node[1], take, walk)
            else:
                for v in node:
                    walk(v)
        return node

    keyed = body_for_key(body, content_type, None)
    walk(keyed)
    if type(keyed) is dict and MASK_PREFIX in str(keyed.get("text", "")):  # credential lines
        found += _formtext.line_values(body.decode(), is_secret_name, NAME_HINTS)
    return found


def _says_json(content_type: str, legacy: bool) -> bool | None:
    """Whether a body of this type is keyed as JSON: True when its type says JSON
    (``application/json``, ``*+json``), False when it says another (``text/plain``: a text
    server reads ``{"a":1, "b":2}`` and ``{"b":2,"a":1}`` as two texts), None when there is
    none: the body's first byte decides, as a client sending JSON without a type (``content=``)
    means it. ``legacy``: the rule before, a JSON-looking body under any type being JSON."""
    if "json" in content_type:
        return True
    return None if legacy or not content_type.strip() else False


def _holds_credential(body: bytes) -> bool:
    """Whether a body that a non-JSON type says is text is JSON holding a credential field:
    keyed as JSON then (its layout not told apart), as text masking reads credential lines
    (``password: ...``), not JSON fields, and the key's input must not hold one in plain."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return data is not None and bool(credentials_in(body, "application/json"))


def _exact_json(body: bytes) -> Any:
    """``body`` (JSON that orjson accepted, so the stdlib does too) with big integers exact."""
    import json  # only for bodies with long digit runs

    return json.loads(body)


def parsed_since_legacy(content_type: str) -> bool:
    """Whether a body of this type may be keyed otherwise by ``legacy=True``: form and
    multipart bodies (parsed now, text before)."""
    mime = split_content_type(content_type)[0]
    return mime == _FORM or mime.startswith("multipart/")


def _text(body: bytes, content_type: str, legacy: bool = False) -> Any:
    """``legacy``: as keys had it before credential lines were masked (and forms parsed)."""
    multipart = content_type.startswith("multipart/")
    if multipart:
        # The boundary is random per request; without this no upload would ever match.
        _, _, boundary = content_type.partition("boundary=")
        if boundary:
            body = body.replace(boundary.strip('"').encode(), b"BOUNDARY")
    if len(body) <= INLINE_TEXT:
        try:
            text = body.decode()
        except UnicodeDecodeError:
            pass
        else:
            # A credential line's value (``password: ...``) is masked as a JSON field's is:
            # keyed by its value, so neither the key's input nor a stored copy holds it.
            if multipart or legacy:
                return {"text": text}
            return {"text": _formtext.mask_lines(text, mask, is_secret_name, NAME_HINTS)}
    return _digest(body)


def _digest(data: bytes) -> dict[str, Any]:
    return {"xxh3_128": xxhash.xxh3_128_hexdigest(data), "size": len(data)}


# ---------------------------------------------------------------- forms


def _form(body: bytes) -> dict[str, Any] | None:
    import urllib.parse  # ~4 ms at import: only when a form is keyed

    try:
        text = body.decode()
    except UnicodeDecodeError:
        return None
    if text.startswith("?") or text.endswith("\n") or _BAD_ESCAPE.search(text):
        return None  # not what a client sends: kept as text, byte for byte
    spans = _formtext.form_spans(text)
    if spans is None:
        return None
    pairs = []
    for start, eq, end in spans:
        try:
            name = urllib.parse.unquote_plus(text[start:eq], errors="strict")
            value = urllib.parse.unquote_plus(text[eq + 1:end], errors="strict")
        except UnicodeDecodeError:
            return None
        pairs.append({name: _query_masked(name, value)})
    return {"form": pairs}


def _query_masked(name: str, value: str) -> str:
    # Credential names are the core's to mask (with ``substitute=``); ``code`` and the other
    # query-only ones are masked here, as canonical_request masks them in the URL.
    return mask(value) if is_secret_query(name) and not is_secret_name(name) else value


# ---------------------------------------------------------------- multipart


def _multipart(body: bytes, boundary: bytes) -> dict[str, Any] | None:
    """The parts of a multipart body (RFC 2046: preamble and epilogue ignored, as servers do),
    or None when it is not well formed."""
    delim = b"--" + boundary
    if body.startswith(delim):
        pos = len(delim)
    else:
        at = body.find(b"\r\n" + delim)
        if at < 0:
            return None
        pos = at + 2 + len(delim)
    parts: list[dict[str, Any]] = []
    while not body.startswith(b"--", pos):  # the close delimiter ends the parts
        eol = body.find(b"\r\n", pos)
        if eol < 0 or body[pos:eol].strip(b" \t"):
            return None
        nxt = body.find(b"\r\n" + delim, eol + 2)
        if nxt < 0:
            return None
        part = _part(body[eol + 2:nxt])
        if part is None:
            return None
        parts.append(part)
        pos = nxt + 2 + len(delim)
    return {"multipart": parts}


def _part(raw: bytes) -> dict[str, Any] | None:
    if raw.startswith(b"\r\n"):
        head, content = b"", raw[2:]
    else:
        head, sep, content = raw.partition(b"\r\n\r\n")
        if not sep:
            return None
    try:
        headers = _headers(head)
    except UnicodeDecodeError:
        return None
    if headers is None:
        return None
    disposition = ctype = None
    meta: dict[str, Any] = {}
    other = []
    for k, v in headers:
        if k == "content-disposition" and disposition is None:
            disposition = v
        elif k == "content-type" and ctype is None:
            ctype = v
        else:
            other.append([k, v])
    name, filename, plain = _disposition(disposition)
    if filename is not None:
        meta["filename"] = filename
    if ctype is not None:
        meta["content_type"] = ctype
    if other:
        meta["headers"] = other
    if not plain:
        meta["disposition"] = disposition
    if not meta:
        return {name: _field(name, content)}
    meta["content"] = mask(content) if is_secret_query(name) else _content(content)
    return {name: meta}


def _headers(head: bytes) -> list[tuple[str, str]] | None:
    out = []
    for line in head.split(b"\r\n") if head else ():
        name, colon, value = line.partition(b":")
        if not colon or not name.strip():
            return None
        out.append((name.strip().lower().decode("ascii"), value.strip().decode()))
    return out


def _disposition(value: str | None) -> tuple[str, str | None, bool]:
    """(field name, filename, whether the header is a plain ``form-data`` one: a type and
    only ``name``/``filename``)."""
    if value is None:
        return "", None, False
    kind, _, rest = value.partition(";")
    params = header_params(";" + rest) if rest else {}
    if params is None:
        return "", None, False
    name = params.get("name")
    plain = (kind.strip().lower() == "form-data" and name is not None
             and set(params) <= {"name", "filename"})
    return name or "", params.get("filename"), plain


def _field(name: str, content: bytes) -> Any:
    if is_secret_query(name):
        try:
            text = content.decode()
        except UnicodeDecodeError:
            return mask(content)  # its digest is no safer than its bytes
        return _query_masked(name, text)
    return _content(content)


def _content(content: bytes) -> Any:
    if len(content) <= INLINE_TEXT:
        try:
            return content.decode()
        except UnicodeDecodeError:
            pass
    return _digest(content)
