"""``dejacache scan PATH...``: find secret-shaped strings before they are committed.

Exit status 1 when anything is found, so it works as a pre-commit hook::

    - repo: local
      hooks:
        - id: dejacache-scan
          name: no secrets in cassettes
          entry: dejacache scan
          language: system
          files: cassettes/.*\\.json$
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from collections.abc import Iterable, Iterator

from .. import _formtext, _secrets
from .._secrets import PLACEHOLDER
from ..errors import CassetteError
from . import blob_audit, blobs

__all__ = ["Finding", "iter_files", "scan_text"]

_SKIP_DIRS = frozenset({".git", ".hg", ".venv", "venv", "node_modules", "__pycache__",
                        ".mypy_cache", ".ruff_cache", ".dejacache"})
_MAX_BYTES = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    path: str
    line: int
    kind: str
    excerpt: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.excerpt}"


def _mask(s: str) -> str:
    return s[:6] + "…" + f"({len(s)} chars)" if len(s) > 10 else "…"


# A credential field with a value: JSON (``"password": "hunter2"``) or YAML
# (``password: hunter2``). Each alternative is linear: no repetition can match the same text
# two ways. Which names are credentials is ``_secrets.is_secret_name``'s rule for answers, so a
# recorded ``"token": "Hello"`` (logprobs) is data, not a finding.
_JSON_FIELD = re.compile(r'"([A-Za-z][A-Za-z0-9_\-]{1,63})"[ \t]*:[ \t]*"((?:[^"\\\n]|\\.)+)"')
_YAML_FIELD = re.compile(r"^[ \t]*(?:-[ \t]+)?([A-Za-z][A-Za-z0-9_\-]{1,63}):[ \t]+(\S[^#\n]*)")
# Values that stand for a credential rather than hold one.
_NOT_A_VALUE = frozenset({PLACEHOLDER, "****", "***", "null", "~", "true", "false", "none",
                          "None", "''", '""', "<volatile>"})
_SCHEMES = frozenset({"bearer", "basic", "token", "digest"})
_LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what splitlines splits on


def scan_text(text: str, path: str = "") -> Iterator[Finding]:
    """Secret-shaped strings and credential fields with a value in ``text`` (JSON and YAML
    fields, ``name=value`` pairs of queries and forms, multipart fields), line by line.
    Only the kinds whose needles occur in the whole text are looked for, and on a line only
    where one occurs (measured on a 1 MB cassette: 1.2 s a pass with every regex on every
    line); fields only on lines with a ``:``."""
    shapes = _secrets.shapes_in(text)
    fields = ":" in text
    pairs = "=" in text and _formtext.hinted(text, _secrets.NAME_HINTS)
    coded = _in_base64(text)
    if not shapes and not fields and not pairs and not coded:
        return
    headers = _header_pairs(text)
    named = {at for at, _, _ in headers}  # (a header pair named ``proxy-auth``: found once)
    parts = sorted(_multipart_fields(text) + headers + coded + [
        p for p in _basic_credentials(text) if p[0] not in named], reverse=True)
    # With multipart fields, lines are read with their breaks, to know where each ends: a
    # field is reported on the line that names it.
    keep = bool(parts)
    end = 0
    for lineno, line in enumerate(text.splitlines(keepends=keep), 1):
        if keep:
            end += len(line)
            line = line.rstrip(_LINE_BREAKS)  # at most one: where splitlines split
        for kind, m in _secrets.find_secrets(line, shapes):
            found = m.group(0)
            if PLACEHOLDER in found:
                continue
            yield Finding(path, lineno, kind, _mask(found))
        if fields and ":" in line:
            for name, value in _credential_fields(line):
                yield Finding(path, lineno, f"credential field {name!r}", _mask(value))
        if pairs and "=" in line:
            for name, value in _formtext.pair_fields(line, _secrets.is_secret_pair,
                                                     _secrets.NAME_HINTS):
                if value not in _NOT_A_VALUE:
                    yield Finding(path, lineno, f"credential field {name!r}", _mask(value))
        while parts and parts[-1][0] < end:
            _, kind, value = parts.pop()
            yield Finding(path, lineno, kind, _mask(value))


# A run of base64 (either alphabet) long enough to hold the shortest secret shape (a Slack
# token's 15 characters: 20 of base64), starting where a blob does (after a quote, the ``,``
# of a data URL, the ``.`` of a JWT, a space): an echo of a request's bytes, a token's
# payload. Reading them costs a scan ~40 ms a MB of chat answers and ~90 ms a MB of
# 900-byte base64 strings (whole scans of those: ~225 and ~285 ms).
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/_\-])[A-Za-z0-9+/_\-]{20,}")


def _in_base64(text: str) -> list[tuple[int, str, str]]:
    """Secret-shaped strings inside base64 runs of ``text`` (a request's body an echo
    server answered base64-encoded, recorded before answers were looked into for it), as
    (offset of the run, kind, secret). Only shapes are known here: a credential of no
    known shape, redacted from the request, cannot be recognised in an answer. The runs
    are decoded into one text, a line each, and its shapes looked for once."""
    import binascii
    import bisect

    starts: list[int] = []  # where each run's line starts in the decoded text
    where: list[int] = []  # and where the run is in ``text``
    lines: list[str] = []
    at = 0
    for m in _B64_RUN.finditer(text):
        run = m.group(0).replace("-", "+").replace("_", "/")
        try:
            raw = binascii.a2b_base64(run[:len(run) - (len(run) % 4 == 1)] + "==")
        except binascii.Error:
            continue
        line = raw.decode("utf-8", "replace").replace("\n", " ") + "\n"
        starts.append(at)
        where.append(m.start())
        lines.append(line)
        at += len(line)
    decoded = "".join(lines)
    return [(where[bisect.bisect_right(starts, hit.start()) - 1], f"{kind} in base64",
             hit.group(0))
            for kind, hit in _secrets.find_secrets(decoded, _secrets.shapes_in(decoded))
            if PLACEHOLDER not in hit.group(0)]


def _multipart_fields(text: str) -> list[tuple[int, str, str]]:
    """Credential fields of multipart text (raw, or a JSON string's escapes) as (offset,
    kind, value): a part's value is on a later line than its name in a raw file, so the
    whole text is read once, and each field is reported on the line naming it."""
    if "form-data" not in text:
        return []
    return [(at, f"credential field {name!r}", value)
            for at, name, value in _formtext.multipart_fields(text, _secrets.is_secret_pair)
            if value not in _NOT_A_VALUE and not value.startswith(_formtext.SKIP_VALUES)]


# A ``"headers"`` list of ``[name, value]`` pairs, on one line or many (how a cassette keeps
# a response's headers): a pair is a finding by the request headers' rule, the one stored
# response headers are masked by, so a file written before a response's ``X-Hub-Signature``
# or ``X-Auth`` was masked is not called clean. Each alternative is linear, like the fields'.
_HEADERS_AT = re.compile(r'"headers"[ \t]*:[ \t]*\[')
_HEADER_PAIR = re.compile(
    r'\s*\[\s*"((?:[^"\\\n]|\\.){1,128})"\s*,\s*"((?:[^"\\\n]|\\.)*)"\s*\]\s*,?')


def _header_pairs(text: str) -> list[tuple[int, str, str]]:
    """Credential headers with a value in ``"headers"`` lists of pairs, as (offset of the
    name, kind, value)."""
    if '"headers"' not in text:
        return []
    from ..http.headers import is_credential  # (the one rule; loaded for such files only)

    found = []
    for m in _HEADERS_AT.finditer(text):
        pos = m.end()
        while (p := _HEADER_PAIR.match(text, pos)) is not None:
            name, value = p.group(1), p.group(2)
            if (value not in _NOT_A_VALUE and PLACEHOLDER not in value
                    and _secrets.MASK_PREFIX not in value and is_credential(name)):
                found.append((p.start(1), f"credential header {name!r}", value))
            pos = p.end()
    return found


# A JSON field or a ``[name, value]`` pair's name ending in ``auth`` (every
# ``_secrets.AUTH_PAIR_NAMES`` name does, in any spelling) before a string or a list: its value
# is read whole, on one line or many, and judged by the rule keys, stores and cassettes mask
# by (``_secrets.held_kind``), so a file recorded before basic credentials were masked
# (``"auth": ["alice", "..."]``) is not called clean.
_AUTH_AT = re.compile(
    r'"((?:[A-Za-z][A-Za-z0-9_\-]{0,59})?[Aa][Uu][Tt][Hh])"[ \t\r\n]*([:,])[ \t\r\n]*(?=["\[])')
_FIELD_BEFORE = re.compile(r'"((?:[^"\\\n]|\\.){1,256})"[ \t\r\n]*:[ \t\r\n]*\Z')
_CLOSE = re.compile(r"[ \t\r\n]*\]")
_SPACE = " \t\r\n"


def _basic_credentials(text: str) -> list[tuple[int, str, str]]:
    """Passwords of basic credentials under ``auth``-like names, kept plain, as (offset of
    the name, kind, password)."""
    # In any case (``aUtH``, ``Proxy-AuTh``), as the pattern reads names: a lower-cased copy
    # searched once cost 2.2 ms a MB where two case spellings searched cost 3.1 (the
    # pattern ~9).
    if 'uth"' not in text.lower():
        return []
    import json  # (for such files only)

    decoder = json.JSONDecoder()
    found = []
    for m in _AUTH_AT.finditer(text):
        name = m.group(1)
        try:
            value, end = decoder.raw_decode(text, m.end())
        except ValueError:
            continue
        if m.group(2) == ":":
            kind = _secrets.held_kind(name, value, _no_credential)
        else:  # a pair: ``[`` before the name, ``]`` after the value
            start = m.start() - 1
            while start >= 0 and text[start] in _SPACE:
                start -= 1
            if start < 0 or text[start] != "[" or _CLOSE.match(text, end) is None:
                continue
            parent = _FIELD_BEFORE.search(text, max(0, start - 300), start)
            kind = _secrets.pair_kind([name, value], _no_credential,
                                      parent.group(1) if parent else None)
        password = _plain_password(value) if kind == _secrets.BASIC else None
        if password is not None:
            found.append((m.start(1), f"credential field {name!r} (a basic-auth password: "
                                      "re-record, dejacache now masks it)", password))
    return found


def _no_credential(name: str) -> bool:
    return False  # (credential names are the fields' and headers' rules)


def _plain_password(value: object) -> str | None:
    """The password of basic credentials ``value`` as a file holds it, unless masked: what
    ``_secrets.basic_auth`` hides."""
    leaves: list[object] = []

    def hide(x: object) -> object:
        leaves.append(x)
        return x

    _secrets.basic_auth(value, hide, lambda x: x)
    for x in leaves:
        if (type(x) is str and x not in _NOT_A_VALUE and PLACEHOLDER not in x
                and _secrets.MASK_PREFIX not in x):
            return x
    return None


def _credential_fields(line: str) -> Iterator[tuple[str, str]]:
    pairs = [(m.group(1), m.group(2)) for m in _JSON_FIELD.finditer(line)]
    if not pairs:
        y = _YAML_FIELD.match(line)
        if y is not None:
            pairs = [(y.group(1), y.group(2).strip().strip("'\""))]
    for name, value in pairs:
        scheme, _, rest = value.partition(" ")
        if scheme.lower() in _SCHEMES and (not rest.strip() or rest.strip() in _NOT_A_VALUE):
            continue  # "Authorization: Bearer" names a scheme, holds nothing
        if (value and value not in _NOT_A_VALUE and PLACEHOLDER not in value
                and _secrets.MASK_PREFIX not in value
                and _secrets.is_secret_name(name, response=True)):
            yield name, value


def iter_files(paths: Iterable[str]) -> Iterator[pathlib.Path]:
    """The files under ``paths``; a path that does not exist is a ``CassetteError`` (a hook
    given a misspelt path must not report it clean)."""
    for raw in paths:
        p = pathlib.Path(raw)
        if not p.exists():
            raise CassetteError("no such file or directory", path=p)
        if p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
                for f in sorted(files):
                    if not _is_blob(root, f):  # read with the cassettes that use them
                        yield pathlib.Path(root) / f
        else:
            yield p


def scan_file(path: pathlib.Path) -> list[Finding]:
    """The findings in ``path`` and, for a cassette, in the text blobs it uses (a tool's
    long output is a blob; audio and images in base64 are not read)."""
    try:
        if path.stat().st_size > _MAX_BYTES:
            return []
        data = path.read_bytes()
    except OSError:
        return []
    if b"\0" in data[:8192]:  # binary files cannot be cassettes
        return []
    found = list(scan_text(data.decode("utf-8", errors="replace"), str(path)))
    if path.suffix == ".json" and blobs.refers(data):
        found += _in_blobs(path, data)
    return found


def _in_blobs(path: pathlib.Path, data: bytes) -> list[Finding]:
    from .document import load_document

    try:
        used = blobs.used_by(load_document(data, path, verify=False))
    except CassetteError:
        return []
    folder = blobs.Folder.beside(path)
    found: list[Finding] = []
    for h in sorted(used):
        try:
            text = folder.read(h)
        except CassetteError:
            continue  # verify's blobs check names it
        if blob_audit.is_text(text):
            where = f"{path} (blob {folder.path(h)})"
            found += scan_text(text.decode("utf-8", errors="replace"), where)
    return found


def _is_blob(root: str, name: str) -> bool:
    parent = pathlib.Path(root)
    return (parent.parent.name == blobs.FOLDER and len(parent.name) == 2
            and blobs.blob_of("blob:" + name) is not None)
