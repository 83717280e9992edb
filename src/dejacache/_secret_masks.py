"""How dejacache masks a credential once ``_secrets``' rules have found one: secret-shaped
text and URL queries in strings (:func:`mask_text`, :func:`mask_url_queries`), the keyed
``<secret:HEX>`` masks and the per-user key behind them (:func:`mask`, :func:`secret_key`),
and the stores' scrubbing of a canonical request (:func:`scrub_request`).

Read through ``_secrets`` (``from ._secrets import mask``): this module is loaded the first
time one of these names is, which a replay hit never does.
"""

from __future__ import annotations

import _thread
import functools
import os
import re
import warnings
from collections.abc import Callable, Iterator

import orjson

from ._secrets import (
    DATA,
    MASK_PREFIX,
    PLACEHOLDER,
    URL_BYTES,
    URL_TEXT,
    Shape,
    held,
    is_secret_name,
    is_secret_query,
    name_kind,
    pair_kind,
    params_may,
    take_vouched,
    userinfo_may,
    value_kind,
    wraps_secret,
)
from .errors import DejacacheWarning

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import hashlib
    import pathlib
    from typing import Any, AnyStr, Final

__all__ = ["MASK_RE", "SECRET_PATTERNS", "Scrubber", "find_secrets", "guarded", "key_loaded",
           "key_path", "keyed_digest", "mask", "mask_text", "mask_url_queries", "may_be_secret",
           "scrub_invariant", "scrub_request", "secret_key", "shapes_in", "with_secrets"]


_MASK: Final = r"<secret:[0-9a-f]{128}>"  # a whole key mask (``MASK_RE``)


def _has_params(url: AnyStr, n: tuple[AnyStr, ...]) -> bool:
    """Whether one URL (a match of the URL pattern) has a query or fragment to read."""
    return n[2] in url or n[3] in url


_HIDDEN_DUMP: Final = b'"**********"'


def with_secrets(model: Any, data: Any) -> Any:
    """``data`` (``model``'s JSON dump) with each secret it dumped as ``"**********"``
    keyed by its value (:func:`mask`). Walks the model only when the dump shows one: one
    C-speed scan of the dump otherwise (~0.3 µs a message model)."""
    try:
        if _HIDDEN_DUMP not in orjson.dumps(data):
            return data
    except TypeError:  # a python-mode dump (the JSON one failed): walk it
        pass
    return _revealed(model, data)


def _revealed(value: Any, dumped: Any) -> Any:
    t = type(value)
    if wraps_secret(t):
        return mask(value.get_secret_value())
    if type(dumped) is dict:
        own = value if isinstance(value, dict) else getattr(value, "__dict__", None)
        if isinstance(own, dict):
            return {k: _revealed(own[k], d) if k in own else d for k, d in dumped.items()}
    elif type(dumped) is list and isinstance(value, (list, tuple)) and len(value) == len(
            dumped):
        return [_revealed(v, d) for v, d in zip(value, dumped, strict=True)]
    return dumped


class _Compiled:
    """The patterns of ``_secret_shapes.py`` and the mask, compiled the first time one is
    needed: ~3-8 ms of regex compilation that ``import dejacache`` paid in processes that may
    never look at a credential."""

    __slots__ = ("kinds", "mask", "needles", "param", "param_b", "shapes", "trigger", "url",
                 "url_b", "userinfo_b")

    def __init__(self) -> None:
        from ._secret_shapes import (  # (their text: read once, here)
            NEEDLES,
            PARAM,
            SHAPES,
            URL,
            USERINFO,
        )

        self.shapes = {k: re.compile(p) for k, p in SHAPES.items()}
        self.kinds: tuple[Shape, ...] = tuple(
            (k, NEEDLES[k], p) for k, p in self.shapes.items())
        # (needle, its kind's pattern, gate), kind by kind: one loop over them costs less than
        # a generator per kind (30 kinds: 12 -> 2 us a short string). Gate 1: the needle holds
        # ``_``, 2: ``-``; a string without that character skips it (prose has no ``_``:
        # half the needles, each a scan of the whole string).
        self.needles = tuple((n, p, 1 if "_" in n else 2 if "-" in n else 0)
                             for _, ns, p in self.kinds for n in ns)
        # Any needle, ``://`` or a mask: a string without one holds nothing to guard.
        needles = sorted({n for ns in NEEDLES.values() for n in ns} | {"://", MASK_PREFIX})
        self.trigger = re.compile("|".join(map(re.escape, needles)))
        self.url = re.compile(URL)
        self.url_b = re.compile(URL.encode())
        self.param = re.compile(PARAM)
        self.param_b = re.compile(PARAM.encode())
        self.userinfo_b = re.compile(USERINFO.encode())
        self.mask = re.compile(_MASK)


if TYPE_CHECKING:
    #: Secret-shaped strings by kind (compiled ``_secret_shapes.SHAPES``).
    SECRET_PATTERNS: dict[str, re.Pattern[str]]
    #: A whole key mask.
    MASK_RE: re.Pattern[str]


@functools.cache
def _re() -> _Compiled:
    return _Compiled()


def __getattr__(name: str) -> Any:
    # The public compiled patterns, compiled on first read and then plain globals.
    if name == "SECRET_PATTERNS":
        value: Any = _re().shapes
    elif name == "MASK_RE":
        value = _re().mask
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def mask_text(s: str, replace: Callable[[str], str],
              query: Callable[[str], bool] = is_secret_query) -> str:
    """``s`` with every secret-shaped part, credential query values inside URLs, and
    credential values of form-encoded or multipart text (``_formtext``) passed through
    ``replace``."""
    c = _re()
    ran = None
    has = (True, "_" in s, "-" in s)  # masks and placeholders add neither
    for needle, pat, gate in c.needles:  # a flat loop: a short string pays ~40 ns a needle
        if pat is not ran and has[gate] and needle in s:
            ran = pat
            s = pat.sub(lambda m: _swap(m, replace), s)
    if "=" in s:  # (every multipart part header names its field with ``name=`` too)
        # Imported here: a key checks names and URL queries, not form text, so a replay
        # hit leaves _formtext unloaded (~0.15 ms).
        from . import _formtext

        s = _formtext.mask_form(s, replace, query)  # form text, and pairs in other text
        if _formtext.may_hold_multipart(s):  # multipart text: parts named like credentials
            s = _formtext.mask_multipart(s, replace, query)
    if params_may(s, URL_TEXT):
        param = c.param
        s = c.url.sub(lambda m: param.sub(lambda p: _param(p, replace, query), m.group(0))
                      if _has_params(m.group(0), URL_TEXT) else m.group(0), s)
    return s


def shapes_in(text: str) -> tuple[Shape, ...]:
    """The kinds of secret shape whose needles occur in ``text``: only these can match in it,
    or in any part of it (``dejacache scan`` checks a whole file once, then its lines)."""
    return tuple(k for k in _re().kinds if any(n in text for n in k[1]))


@functools.cache
def _all_needles() -> tuple[str, ...]:
    from ._secret_shapes import NEEDLES  # (once: cached)

    return tuple(sorted({n for ns in NEEDLES.values() for n in ns}))


def may_be_secret(s: str) -> bool:
    """Whether ``s`` holds a substring every match of some secret shape holds: False means it
    holds none, decided without compiling a pattern (compiling them all costs ~3-8 ms, which
    a replay that only reads short header values would otherwise pay on its first call)."""
    return any(n in s for n in _all_needles())


def find_secrets(s: str, shapes: tuple[Shape, ...] | None = None
                 ) -> Iterator[tuple[str, re.Match[str]]]:
    """Secret-shaped matches in ``s`` as (kind, match), among ``shapes`` (default: all); a
    regex runs only when one of its needles occurs in ``s``."""
    for kind, needles, pat in _re().kinds if shapes is None else shapes:
        for n in needles:
            if n in s:
                for m in pat.finditer(s):
                    yield kind, m
                break


def guarded(s: str) -> list[tuple[int, int, str]]:
    """The parts of ``s`` that volatile patterns must never rewrite, as sorted, disjoint
    ``(start, end, text)``: secret shapes and keyed masks as they are, and credential values
    inside URL queries already replaced by their keyed masks (a pattern that rewrote the URL
    around one would otherwise hide it from the key's masking). Empty for most strings.

    Credentials are masked before anything volatile is looked for: a date pattern must not
    turn passwords ``pw-2024-01-01`` and ``pw-1999-12-31`` into one key."""
    c = _re()
    params = params_may(s, URL_TEXT)
    if not params and c.trigger.search(s) is None:
        return []
    spans = [m.span() for _, m in find_secrets(s)]
    if MASK_PREFIX in s:
        spans.extend(m.span() for m in c.mask.finditer(s))
    masked: list[tuple[int, int, str]] = []
    if params:
        for u in c.url.finditer(s):
            if not _has_params(u.group(0), URL_TEXT):
                continue
            for p in c.param.finditer(u.group(0)):
                if p.group(2) and is_secret_query(p.group(1)):
                    a, b = u.start() + p.start(2), u.start() + p.end(2)
                    spans.append((a, b))
                    masked.append((a, b, mask(p.group(2))))
    return _regions(s, spans, masked)


def _regions(s: str, spans: list[tuple[int, int]],
             masked: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Overlapping ``spans`` merged, each region's text with the ``masked`` parts swapped in."""
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    masked.sort()
    out: list[tuple[int, int, str]] = []
    i = 0
    for a, b in merged:
        parts: list[str] = []
        pos = a
        while i < len(masked) and masked[i][0] < b:
            x, y, text = masked[i]
            parts += [s[pos:x], text]
            pos = y
            i += 1
        parts.append(s[pos:b])
        out.append((a, b, "".join(parts)))
    return out


def _swap(m: re.Match[str], replace: Callable[[str], str]) -> str:
    text, (a, b) = m.group(0), m.span("s")
    start = m.start()
    return text[: a - start] + replace(text[a - start : b - start]) + text[b - start :]


def _param(p: re.Match[str], replace: Callable[[str], str], query: Callable[[str], bool]) -> str:
    name, value = p.group(1), p.group(2)
    if not value or not query(name) or value.startswith((PLACEHOLDER, MASK_PREFIX)):
        return p.group(0)
    return f"{name}={replace(value)}"


def mask_url_queries(data: bytes) -> bytes:
    """Canonical JSON with the credentials of URLs inside its strings (``?api_key=...``,
    ``#access_token=...``, ``://user:pw@``) replaced by their keyed masks, in place (nothing
    else is re-encoded): a key holds a URL's credential only as a keyed digest, which cannot
    be guessed offline from the key.

    Keys call this on every full canonical form: a form without the characters a URL
    credential needs pays a few substring checks (:func:`url_may_hold_secret`).
    """
    if userinfo_may(data, URL_BYTES):
        data = _re().userinfo_b.sub(_userinfo_b, data)
    if not params_may(data, URL_BYTES):
        return data
    c = _re()  # (not before: a replay hit compiles no pattern)
    # Only the JSON strings holding a ``?`` or ``#`` are read for URLs: a URL lies in one
    # string (a quote ends it), and URLs are matched at ~200 MB/s, so a base64 image's
    # ``/``s cost 5 ms a MB while a question elsewhere held a ``?`` (the quote searches: ~10 us).
    out: list[bytes] = []
    pos = 0  # data[:pos] is in out
    nq, nh = data.find(b"?"), data.find(b"#")
    while nq >= 0 or nh >= 0:
        at = nh if nq < 0 or 0 <= nh < nq else nq
        start = max(data.rfind(b'"', pos, at) + 1, pos)
        end = data.find(b'"', at)
        end = len(data) if end < 0 else end
        text = data[start:end]
        masked = c.url_b.sub(_url_params_b, text)
        if masked != text:
            out += (data[pos:start], masked)
            pos = end
        nq = data.find(b"?", end) if 0 <= nq < end else nq
        nh = data.find(b"#", end) if 0 <= nh < end else nh
    if not out:
        return data
    out.append(data[pos:])
    return b"".join(out)


def _url_params_b(m: re.Match[bytes]) -> bytes:
    url = m.group(0)
    return _re().param_b.sub(_param_b, url) if _has_params(url, URL_BYTES) else url


def _userinfo_b(m: re.Match[bytes]) -> bytes:
    a, b = m.span("s")
    start = m.start()
    text = m.group(0)
    return (text[: a - start] + mask(m.group("s").decode("utf-8", "replace")).encode()
            + text[b - start :])


def _param_b(p: re.Match[bytes]) -> bytes:
    # A value that already looks like a mask is masked again: a password that literally is
    # another password's mask must not key as that password.
    name, value = p.group(1), p.group(2)
    if not value:
        return p.group(0)
    if not is_secret_query(name.decode("utf-8", "replace")):
        return p.group(0)
    return name + b"=" + mask(value.decode("utf-8", "replace")).encode()


class Scrubber:
    """Masks secret-shaped strings in JSON trees, one distinct string at a time (agents resend
    the same messages every step, so each string is scanned once)."""

    __slots__ = ("_memo", "_names", "replace")

    def __init__(self, replace: Callable[[str], str]) -> None:
        self.replace = replace
        self._memo: dict[str, str] = {}
        # A dict key -> (its text masked, its :func:`name_kind`): one lookup a key where
        # asking each cost a call (a 40-message request: ~80 keys a scrub).
        self._names: dict[str, tuple[str, int]] = {}

    def text(self, s: str) -> str:
        done = self._memo.get(s)
        if done is None:
            done = mask_text(s, self.replace)
            if len(self._memo) >= _MEMO_MAX:
                self._memo.clear()
            self._memo[s] = done
        return done

    def tree(self, node: Any, parent: str | None = None) -> Any:
        """``node`` with its secrets masked; ``parent``: the field it is held under (None for
        a list item or the whole tree), which says whether a list of two is a pair."""
        t = type(node)
        if t is str:
            return self.text(node)
        if t is dict:
            out = {}
            for k, v in node.items():
                name = self._names.get(k) or self._name(k)
                kind = value_kind(name[1], v) if name[1] else DATA
                out[name[0]] = held(kind, v, self._leaf, self.tree) if kind else self.tree(v, k)
            return out
        if t is list:
            kind = pair_kind(node, is_secret_name, parent)
            if kind:
                return [self.text(node[0]), held(kind, node[1], self._leaf, self.tree)]
            return [self.tree(v) for v in node]
        return node

    def _name(self, k: str) -> tuple[str, int]:
        name = (self.text(k), name_kind(k, is_secret_name))
        if len(self._names) >= _MEMO_MAX:
            self._names.clear()
        self._names[k] = name
        return name

    def _leaf(self, v: Any) -> str:
        """A credential's leaf: strings through ``replace`` (a keyed mask already there
        stays: the canonical form stores scrub holds the key's masks), numbers masked."""
        if type(v) is str:
            return v if _re().mask.fullmatch(v) else self.replace(v)
        return mask(v)


def _keyed(secret: str) -> str:
    return mask(secret)


_STORE_SCRUB = Scrubber(_keyed)


def scrub_request(canonical: bytes) -> bytes:
    """A canonical request as stores keep it (and miss reports print it): secret-shaped
    strings anywhere replaced by keyed masks. The key was computed before, from the form
    with credential *names* masked; shaped secrets are long random strings, so leaving them
    in the digest's input gives a dictionary attack nothing to work with."""
    vouched = take_vouched(canonical)
    if vouched is not None and vouched[0] is canonical and vouched[1]():
        # Canonical JSON (orjson, sorted) that scrubbing leaves as it is: what the parse,
        # walk and dump below would write (the None mark, a trailing space, is not kept).
        return vouched[2]
    try:
        tree = orjson.loads(canonical)
    except orjson.JSONDecodeError:
        return canonical
    return orjson.dumps(_STORE_SCRUB.tree(tree), option=orjson.OPT_SORT_KEYS)


def scrub_invariant(data: bytes) -> bool:
    """Whether :func:`scrub_request` leaves ``data``, one canonical JSON value (orjson,
    sorted keys), as it is: no string in it holds anything to mask."""
    try:
        tree = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return orjson.dumps(_STORE_SCRUB.tree(tree), option=orjson.OPT_SORT_KEYS) == data


# ------------------------------------------------------------------------ the masking key

_KEY_ENV = "DEJACACHE_SECRET_KEY"
_KEY_FILE_ENV = "DEJACACHE_SECRET_KEY_FILE"
_lock = _thread.allocate_lock()
_cache: dict[str, bytes] = {}  # where the key came from -> key
_memo: dict[tuple[bytes, str, bytes], str] = {}
_MEMO_MAX = 4096


def key_path() -> pathlib.Path:
    """Where the per-user masking key lives: never next to the data it protects (a store or
    a cassette directory is often copied, shared or committed as a whole)."""
    import pathlib  # only where a key is looked for: ~4 ms with urllib.parse

    override = os.environ.get(_KEY_FILE_ENV)
    if override:
        return pathlib.Path(override).expanduser()
    if os.name == "nt":
        base = pathlib.Path(os.environ.get("APPDATA") or pathlib.Path.home() / "AppData/Roaming")
    else:
        xdg = os.environ.get("XDG_CONFIG_HOME")
        base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / ".config"
    return base / "dejacache" / "secret.key"


def key_loaded() -> bool:
    """Whether this process has a masking key at hand (loaded, or given in the environment):
    async callers load the first one in a worker thread, never on the event loop. A key file
    named only later in the process (another ``DEJACACHE_SECRET_KEY_FILE``) is read where it
    is first needed. Per call: one truth test (an environment read costs ~3 µs)."""
    return bool(_cache) or bool(os.environ.get(_KEY_ENV))


def secret_key() -> bytes:
    """The 64-byte key of credential masks.

    ``DEJACACHE_SECRET_KEY`` (any string) wins; otherwise a random key in :func:`key_path`,
    created 0600 on first use. Set the same ``DEJACACHE_SECRET_KEY`` on two machines only if
    their stores must match credential arguments without ``substitute=`` (see README).
    """
    env = os.environ.get(_KEY_ENV)
    source = "env:" + env if env else "file:" + str(key_path())
    key = _cache.get(source)
    if key is not None:
        return key
    with _lock:
        key = _cache.get(source)
        if key is None:
            if env:
                key = _blake2b()(env.encode("utf-8", "surrogatepass"), digest_size=64,
                                      person=b"dejacache-key").digest()
            else:
                key = _file_key(key_path())
            _cache[source] = key
            _memo.clear()
    return key


def _file_key(path: pathlib.Path) -> bytes:
    import secrets  # with random: only when a key is first made (import time)

    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        return _process_key(f"cannot read {path} ({exc})")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, secrets.token_hex(64).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # atomic and never overwrites: two first uses agree on one key
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        return _read_key(path)
    except (OSError, ValueError) as exc:
        return _process_key(f"cannot create {path} ({exc})")


def _read_key(path: pathlib.Path) -> bytes:
    text = path.read_text().strip()
    key = bytes.fromhex(text)
    if len(key) != 64:
        raise ValueError("not a 64-byte hex key")
    return key


def _process_key(why: str) -> bytes:
    # Fail open: masks then differ per process, so credential calls miss in the next process,
    # never collide. Say so once.
    import secrets

    warnings.warn(f"dejacache: no masking key: {why}; credential arguments are masked with a "
                  f"key for this process only. Set {_KEY_ENV} to fix.", DejacacheWarning,
                  stacklevel=4)
    return secrets.token_bytes(64)


@functools.cache
def _blake2b() -> type[hashlib.blake2b]:
    # hashlib loads OpenSSL (_hashlib, 2-4 ms) which masks never use: its blake2b is the
    # built-in _blake2 one. Only a credential pays, and only the first.
    try:
        from _blake2 import blake2b
    except ImportError:  # an interpreter built without it: hashlib finds one
        from hashlib import blake2b
    return blake2b


def keyed_digest(data: bytes, person: bytes, size: int = 16) -> str:
    """A hex BLAKE2b of ``data`` keyed with :func:`secret_key` (``person`` keeps digests
    made for different purposes apart): what a file may hold in place of a credential."""
    return _blake2b()(data, digest_size=size, key=secret_key(), person=person).hexdigest()


def mask(value: Any) -> str:
    """``<secret:HEX>``: a keyed, full-length BLAKE2b of ``value`` (its type included, so
    ``1234`` and ``"1234"`` stay apart)."""
    if type(value) is str:
        kind, data = "s", value.encode("utf-8", "surrogatepass")
    elif isinstance(value, (bytes, bytearray, memoryview)):
        kind, data = "b", bytes(value)
    else:
        kind, data = type(value).__name__, repr(value).encode("utf-8", "surrogatepass")
    key = secret_key()
    memo_key = (key, kind, data)
    done = _memo.get(memo_key)
    if done is not None:
        return done
    h = _blake2b()(kind.encode() + b"\x00" + data, digest_size=64, key=key)
    out = MASK_PREFIX + h.hexdigest() + ">"
    if len(_memo) >= _MEMO_MAX:
        _memo.clear()
    _memo[memo_key] = out
    return out
