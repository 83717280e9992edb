"""What counts as a credential, and how dejacache hides one: the one list every path uses.

Keys (arguments, HTTP bodies), the stores' request column, cassette redaction, miss reports and
``dejacache scan`` all ask this module, so a name or a secret-shaped string masked in one place
is masked in all of them (``token`` and ``aws_secret_access_key`` used to reach
SQLite while cassettes hid them).

Two kinds of hiding:

- **Keys mask**: a credential inside a canonical request becomes ``<secret:HEX>``, a
  full-length BLAKE2b of the value keyed with a per-user secret (:func:`secret_key`), so
  different credentials still give different keys but a store file cannot be dictionary-
  attacked for a weak password without also stealing the key, which lives elsewhere.
- **Files redact**: cassette files, miss reports and CLI output show ``<REDACTED>``; a file
  that is committed must not depend on the machine that wrote it.
"""

from __future__ import annotations

import _thread
import functools
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence

import orjson

from ._lazy import pattern
from .errors import DejacacheWarning

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    import hashlib
    import pathlib
    from typing import Any, AnyStr, Final

__all__ = [
    "AUTH_PAIR_NAMES",
    "AUTH_QUERY",
    "BASIC",
    "BYTES_TAG",
    "CREDENTIAL",
    "DATA",
    "MASK_PREFIX",
    "NAME_HINTS",
    "PAIR_NAME_MAX",
    "PLACEHOLDER",
    "SECRET_NAMES",
    "SCHEMA_VALUES",
    "SECRET_PATTERNS",
    "SENSITIVE_HEADERS",
    "SESSION_QUERY",
    "Shape",
    "basic_auth",
    "credential",
    "credential_token",
    "find_secrets",
    "guarded",
    "held",
    "held_kind",
    "hidden",
    "is_auth_name",
    "is_auth_query",
    "is_basic_auth",
    "is_credential_token",
    "is_schema",
    "is_secret_name",
    "is_secret_pair",
    "is_secret_query",
    "key_loaded",
    "keyed_digest",
    "Scrubber",
    "mask",
    "mask_text",
    "mask_url_queries",
    "may_be_secret",
    "name_forms",
    "name_kind",
    "normalize",
    "pair_kind",
    "placeholder",
    "scrub_request",
    "secret_key",
    "scrub_invariant",
    "shapes_in",
    "url_may_hold_secret",
    "value_kind",
    "vouch",
]

# ------------------------------------------------------------------------------- names

#: Credential names, normalised (lower case, ``_`` for ``-`` and camelCase humps). A value
#: under one of these names is a credential wherever it appears: an argument, a body field,
#: a header, a query parameter, a response field.
SECRET_NAMES: Final = frozenset({
    "api_key", "apikey", "x_api_key", "x_goog_api_key", "api_token", "api_secret",
    "access_token", "refresh_token", "id_token", "auth_token", "session_token",
    "security_token", "x_amz_security_token", "bearer", "bearer_token", "token",
    "secret", "client_secret", "secret_key", "private_key", "password", "passwd", "passphrase",
    "pwd", "pswd", "pass", "passcode", "authorization", "proxy_authorization", "cookie",
    "set_cookie",
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
    "openai_api_key", "anthropic_api_key", "github_token", "gh_token", "hf_token",
    "slack_token", "npm_token", "credentials", "credential", "creds",
    # GitLab's ``private_token``, Azure's ``subscription_key``, an S3-style ``access_key``,
    # Vault's ``client_token`` and a JWT login's ``jwt``; OpenStack Keystone answers with its
    # token in ``X-Subject-Token``.
    "private_token", "subscription_key", "access_key", "client_token", "jwt", "x_subject_token",
})
# ``foo_api_key``, ``db_password``, ``stripe_secret_key``... A bare ``*_token`` is not here:
# ``eos_token``/``next_page_token`` are data, and masking a response's page token breaks replay.
# ``db_pwd`` and ``gpg_passphrase`` too; not ``_pass`` (``boarding_pass``, ``first_pass`` are
# data, and a credential argument makes a cassette replay only under the masking key that
# recorded it) nor ``pin`` (GPIO pins, version pins).
_SUFFIXES: Final = ("_api_key", "_apikey", "_secret", "_secret_key", "_password", "_passwd",
                    "_pwd", "_pswd", "_passphrase", "_passcode", "_private_key", "_access_token",
                    "_refresh_token", "_auth_token", "_session_token", "_bearer_token",
                    "_api_token", "_access_key_id", "_secret_access_key")
#: Names that are credentials in requests but data in responses: a ``token`` in logprobs is a
#: word, a shell tool's ``pwd`` its working directory, a test report's ``pass`` a count, and a
#: cassette that redacted them would replay a different answer.
REQUEST_ONLY: Final = frozenset({"token", "pwd", "pass"})
#: Not credentials, but account details a committed cassette should not carry.
SENSITIVE_HEADERS: Final = frozenset({"openai_organization", "openai_project"})
#: Query parameters naming a session (a session cookie's value, sent in the URL): who is
#: asking, never a provider's API key. ``?session=new`` asks something; its value is a setting
#: (``headers.is_setting``), which keys as itself.
SESSION_QUERY: Final = frozenset({"session", "sid", "session_id", "sessionid", "phpsessid",
                                  "jsessionid"})
#: Query parameters that authenticate a request rather than ask something: dropped from HTTP
#: keys (like the ``Authorization`` header, so a recording replays under another API key).
AUTH_QUERY: Final = frozenset({"key", "api_key", "apikey", "access_token", "token", "sig",
                               "signature", "x_amz_signature", "x_amz_credential",
                               "x_amz_security_token", "x_goog_signature", "x_goog_credential",
                               *SESSION_QUERY})
# Secret only as a URL query parameter or a form field (``?code=`` is an OAuth code; a JSON
# body's ``code`` is code): OAuth's proofs of possession (PKCE's verifier, a device code, a
# SAML or JWT assertion, RFC 8693's exchanged tokens) travel there, and so does Firebase's
# ``?auth=`` (masked, not dropped like ``AUTH_QUERY``: ``?auth=false`` elsewhere asks
# something, and a JSON body's ``auth`` is often an object of settings).
_QUERY_ONLY: Final = AUTH_QUERY | {"code", "client_secret", "password", "code_verifier",
                                   "device_code", "assertion", "client_assertion",
                                   "subject_token", "actor_token", "auth"}

_HUMP = r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])"


@functools.lru_cache(maxsize=8192)
def normalize(name: str) -> str:
    """``X-Api-Key``, ``API_KEY`` -> ``x_api_key``, ``api_key`` (case and separators only)."""
    return name.strip().lower().replace("-", "_")


@functools.lru_cache(maxsize=8192)
def name_forms(name: str) -> frozenset[str]:
    """:func:`normalize`, and the same with camelCase humps split (``apiKey`` -> ``api_key``;
    both, since splitting would turn ``OpenAI-Organization`` into ``open_ai_organization``)."""
    bare = name.strip()
    # Every hump has an ASCII capital in it, so a name without capitals is its own split:
    # the names of most calls (``messages``, ``tool_calls``) never compile the pattern
    # (~0.4 ms of a test process's first cassette block).
    split = bare if bare == bare.lower() else _hump().sub("_", bare)
    return frozenset({normalize(name), normalize(split)})


def wraps_secret(t: type) -> bool:
    """pydantic's ``SecretStr``/``SecretBytes``/``Secret[T]``: a credential in a wrapper
    whose every dump is ``"**********"``, whatever it holds (two accounts' keys dumped
    alike, so calls made with them keyed alike)."""
    return t.__module__.startswith("pydantic") and callable(
        getattr(t, "get_secret_value", None))


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


@functools.lru_cache(maxsize=8192)
def is_secret_name(name: str, *, response: bool = False) -> bool:
    """Whether a value under ``name`` is a credential (``response``: in a response body)."""
    for n in name_forms(name):
        if n in SECRET_NAMES:
            return not (response and n in REQUEST_ONLY)
        if n.endswith(_SUFFIXES):
            return True
    return False


#: Names under which HTTP clients take basic credentials as a ``(user, password)`` pair
#: (requests/httpx ``auth``, httpx ``proxy_auth``, elasticsearch ``basic_auth``/``http_auth``,
#: urllib3 ``proxy_basic_auth``; aiohttp's ``BasicAuth`` adds an encoding). Not credential
#: names: an ``"auth": "bearer"`` or ``"auth": {"type": "oauth2"}`` in a tool definition or an
#: MCP config is a setting, and a credential keys as a per-machine mask, so masking every
#: value here would make committed cassettes miss on other machines. Only the password of a
#: value shaped as basic credentials (:func:`is_basic_auth`) is one.
AUTH_PAIR_NAMES: Final = frozenset({"auth", "basic_auth", "http_auth", "proxy_auth",
                                    "proxy_basic_auth"})


@functools.lru_cache(maxsize=8192)
def is_auth_name(name: str) -> bool:
    """Whether ``name`` is one of :data:`AUTH_PAIR_NAMES`, in any spelling."""
    return not AUTH_PAIR_NAMES.isdisjoint(name_forms(name))


#: How keys spell bytes (``keys._tagged``: base64 under this one key), and so how stores and
#: cassettes, which hold the canonical form, see a ``bytes`` argument.
BYTES_TAG: Final = "\x00bytes"


def _is_text(x: Any) -> bool:
    """A user name or password as clients take them: str or bytes (requests encodes either;
    mixed pairs too), or bytes in keys' spelling (:data:`BYTES_TAG`), as stores and
    cassettes hold them."""
    return isinstance(x, (str, bytes, bytearray, memoryview)) or (
        type(x) is dict and len(x) == 1 and type(x.get(BYTES_TAG)) is str)


def is_basic_auth(v: Any) -> bool:
    """Whether ``v``, held under an :func:`is_auth_name` name, is basic credentials: a list
    or tuple (a named tuple too) of 2 or 3 items whose first two are text, str or bytes
    (user, password[, encoding]), or a ``"user:password"`` string (neither part empty, no
    whitespace in the user, not a URL's ``scheme://``). Anything else under those names
    (a dict of settings, a flag, a word) is data and keys as it did."""
    if isinstance(v, str):
        user, colon, pw = v.partition(":")
        return bool(colon and user and pw) and not pw.startswith("//") and not any(
            c.isspace() for c in user)
    return (isinstance(v, (list, tuple)) and 2 <= len(v) <= 3 and _is_text(v[0])
            and _is_text(v[1]))


def basic_auth(v: Any, hide: Callable[[Any], Any], keep: Callable[[Any], Any]) -> Any:
    """``v`` (:func:`is_basic_auth`) as keys, stores and cassettes hold it: the one rule of
    all three. The password is hidden as a credential's value is (:func:`hidden`: bytes
    in keys' spelling keep their tag, its text hidden); the user (and an encoding) stay,
    through ``keep``: a list (tuples as JSON writes them), or ``"user:" + hide(password)``."""
    if isinstance(v, str):
        user, _, pw = v.partition(":")
        return f"{keep(user)}:{hide(pw)}"
    return [keep(v[0]), hidden(v[1], hide), *[keep(x) for x in v[2:]]]


#: What a value held under a name is (:func:`held_kind`): data, a credential (hidden whole,
#: :func:`credential`) or basic credentials (the password hidden, :func:`basic_auth`).
DATA, CREDENTIAL, BASIC = 0, 1, 2


def name_kind(name: str, secret: Callable[[str], bool]) -> int:
    """What ``name`` may hold: ``CREDENTIAL`` when ``secret`` (the walker's list) calls it
    one, ``BASIC`` for an :func:`is_auth_name` (its value decides, :func:`value_kind`),
    else ``DATA``. Walkers may remember the answer by name; never :func:`value_kind`'s."""
    return CREDENTIAL if secret(name) else BASIC if is_auth_name(name) else DATA


def value_kind(kind: int, value: Any) -> int:
    """What ``value`` under a name of :func:`name_kind` ``kind`` is: ``BASIC`` only for
    basic credentials (:func:`is_basic_auth`), ``"auth": "bearer"`` is ``DATA``."""
    return DATA if kind == BASIC and not is_basic_auth(value) else kind


def held_kind(name: str, value: Any, secret: Callable[[str], bool]) -> int:
    """What ``value``, held under ``name`` (a field, or the name of a ``[name, value]`` pair),
    is: the one rule of keys, stores, cassettes and ``dejacache scan``."""
    return value_kind(name_kind(name, secret), value)


def held(kind: int, v: Any, hide: Callable[[Any], Any], walk: Callable[[Any, str | None], Any]
         ) -> Any:
    """``v``, held under a name of :func:`held_kind` ``kind`` (not ``DATA``), as stores and
    cassettes hold it: ``hide`` each credential leaf, ``walk(value, field)`` the rest."""
    if kind == CREDENTIAL:
        return credential(v, hide, walk)
    return basic_auth(v, hide, lambda x: walk(x, None))


#: Substrings (lower case) of every name :func:`is_secret_pair` accepts: text holding none of
#: them holds no credential ``name=value`` (``dejacache scan`` skips its lines).
NAME_HINTS: Final = ("key", "token", "secret", "pass", "pwd", "pswd", "auth", "cookie",
                     "bearer", "cred", "sig", "code", "assertion", "jwt", "sess", "sid")


@functools.lru_cache(maxsize=4096)
def is_secret_pair(name: str) -> bool:
    """Whether ``name=value`` found in a file (a URL query, form or multipart field) holds
    a secret, by its name: a query-only one (``code``, ``key``, ``sig``), a nested one
    (:func:`is_auth_query`) or a credential name as answers use them (``pwd=`` in a tool's
    output is a directory, ``token=`` is still a token)."""
    raw = _unquoted(name)
    return (not _QUERY_ONLY.isdisjoint(name_forms(raw)) or is_secret_name(raw, response=True)
            or _nested_credential(raw))


@functools.lru_cache(maxsize=4096)
def is_secret_query(name: str) -> bool:
    """Whether a URL query parameter carries a credential."""
    raw = _unquoted(name)
    return (not _QUERY_ONLY.isdisjoint(name_forms(raw)) or is_secret_name(raw)
            or _nested_credential(raw))


@functools.lru_cache(maxsize=4096)
def is_auth_query(name: str) -> bool:
    """Whether a URL query parameter says who is asking (:data:`AUTH_QUERY`, or a nested
    name holding a credential, :func:`_nested_credential`): keyed as an identity digest."""
    raw = _unquoted(name)
    return not AUTH_QUERY.isdisjoint(name_forms(raw)) or _nested_credential(raw)


def _unquoted(name: str) -> str:
    import urllib.parse  # with pathlib and ipaddress: ~4 ms at import

    return urllib.parse.unquote_plus(name)


# The parts of a nested parameter's name: Rails', PHP's and qs's ``auth[token]``,
# ``data[attributes][api_key]``, ``token[]``, and dotted ``auth.token``. (Compiled when a
# query name is first judged: the only expression compiled as every process loads this.)
_NESTING: Final = pattern(r"[\[\].]+")


def _nested_credential(raw: str) -> bool:
    """Whether a nested name holds a credential, judged by its parts: its last part
    authenticates (``auth[token]``, ``auth.key``) or any part is a credential name
    (``credentials[user]``, ``user[password]``). The words secret only as a whole query name
    are not (``filter[code]`` is a country, ``auth[type]=oauth2`` a setting)."""
    if "[" not in raw and "." not in raw:
        return False
    parts = [p for p in _NESTING.split(raw) if p]
    return bool(parts) and (not AUTH_QUERY.isdisjoint(name_forms(parts[-1]))
                            or any(is_secret_name(p) for p in parts))


# ---------------------------------------------------------------------- secret shapes

#: What a file shows in place of a secret (cassettes, miss reports, CLI output).
PLACEHOLDER: Final = "<REDACTED>"


#: What a request body holds in place of one of the request's own credentials
#: (``http.exchange.unquoted``): the name it came under, never its value.
_TOKEN_PREFIX: Final = "<credential:"
_TOKEN: Final = pattern(r"<credential:[^\s<>\"\\]{1,256}>")


def credential_token(name: str) -> str:
    """``<credential:NAME>``: the stand-in for a credential sent under ``name`` (a header's
    lower-cased name, ``query:NAME`` percent-encoded)."""
    return f"{_TOKEN_PREFIX}{name}>"


def is_credential_token(value: str) -> bool:
    """Whether ``value`` is one :func:`credential_token` and nothing else: a stand-in that
    holds no secret, so a credential-named field holding it keys as it is, the same on
    every machine (a keyed digest of it would differ on CI's)."""
    return value.startswith(_TOKEN_PREFIX) and _TOKEN.fullmatch(value) is not None


def placeholder(_: Any) -> str:
    """:data:`PLACEHOLDER`, whatever it stands for: the ``replace`` files, logs and error
    messages give :func:`mask_text` and :func:`credential`."""
    return PLACEHOLDER
#: Prefix of a key mask; a whole mask is ``<secret:`` + 128 hex digits + ``>``.
MASK_PREFIX: Final = "<secret:"
_MASK: Final = r"<secret:[0-9a-f]{128}>"


#: One kind of secret-shaped string: its name, substrings every match contains, its regex.
Shape = tuple[str, tuple[str, ...], "re.Pattern[str]"]


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


@functools.cache
def _re() -> _Compiled:
    return _Compiled()


@functools.cache
def _hump() -> re.Pattern[str]:
    # Apart from the others: every cached call checks its argument names, few mask text.
    return re.compile(_HUMP)


if TYPE_CHECKING:
    #: Secret-shaped strings by kind (compiled ``_secret_shapes.SHAPES``).
    SECRET_PATTERNS: dict[str, re.Pattern[str]]
    #: A whole key mask.
    MASK_RE: re.Pattern[str]


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
    if _params_may(s, _TEXT):
        param = c.param
        s = c.url.sub(lambda m: param.sub(lambda p: _param(p, replace, query), m.group(0))
                      if _has_params(m.group(0), _TEXT) else m.group(0), s)
    return s


# Where a credential of a URL may be, one rule for keys (canonical JSON bytes), masks and
# ``guarded`` (text): the parameters of a query or a fragment (``?api_key=``,
# ``#access_token=``) of a URL of any scheme or a relative one (read from its first ``/``), and
# a userinfo password (``://user:pw@``, the "url password" shape). A string without the
# characters these need skips the patterns: a few memchr-speed ``in`` checks, ``=`` first
# (rare in chat text), and the multi-byte ``://`` last, only once an ``@`` is there (``://``
# is a ~1 GB/s search: 0.7 ms of a 1 MB request, when the one-byte checks cost microseconds).
_TEXT: Final = ("=", "/", "?", "#", "@", "://")
_BYTES: Final = tuple(n.encode() for n in _TEXT)


def _params_may(s: AnyStr, n: tuple[AnyStr, ...]) -> bool:
    """Whether ``s`` may hold a URL's query or fragment parameter."""
    return n[0] in s and n[1] in s and (n[2] in s or n[3] in s)


def _has_params(url: AnyStr, n: tuple[AnyStr, ...]) -> bool:
    """Whether one URL (a match of the URL pattern) has a query or fragment to read."""
    return n[2] in url or n[3] in url


def _userinfo_may(s: AnyStr, n: tuple[AnyStr, ...]) -> bool:
    return n[4] in s and n[5] in s


def url_may_hold_secret(data: bytes) -> bool:
    """Whether canonical JSON ``data`` may hold a credential :func:`mask_url_queries` masks:
    False means it holds none (then masking leaves it as it is). True of bytes when it is
    of any bytes they are cut into: each URL lies inside one JSON string."""
    return _params_may(data, _BYTES) or _userinfo_may(data, _BYTES)


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
    params = _params_may(s, _TEXT)
    if not params and c.trigger.search(s) is None:
        return []
    spans = [m.span() for _, m in find_secrets(s)]
    if MASK_PREFIX in s:
        spans.extend(m.span() for m in c.mask.finditer(s))
    masked: list[tuple[int, int, str]] = []
    if params:
        for u in c.url.finditer(s):
            if not _has_params(u.group(0), _TEXT):
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
    if _userinfo_may(data, _BYTES):
        data = _re().userinfo_b.sub(_userinfo_b, data)
    if not _params_may(data, _BYTES):
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
    return _re().param_b.sub(_param_b, url) if _has_params(url, _BYTES) else url


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


#: The longest first item of a list of two that :func:`pair_kind` reads as a name: longer
#: is text (few-shot ``[question, answer]`` pairs), never asked, so the name caches (lru,
#: 8,192 entries each) never keep copies of long texts keys meet in every call's arguments.
PAIR_NAME_MAX: Final = 256


# Fields whose value lists names or values, never a ``[name, value]`` pair: JSON Schema's
# keywords (a tool's ``"required": ["api_key", "q"]`` or ``"enum": ["pass", "fail"]`` read as
# a pair made every request carrying that tool key per machine: a committed cassette missed
# in CI) and the stop sequences of OpenAI's ``stop`` and Anthropic's ``stop_sequences``
# (``"stop": ["password", "x"]`` is two strings the model stops at).
_SCHEMA_LISTS = frozenset({"enum", "required", "examples", "type", "stop", "stop_sequences"})


def pair_kind(node: Sequence[Any], secret: Callable[[str], bool], parent: str | None) -> int:
    """What ``node``, held under the field ``parent`` (None: a list item or a whole value),
    holds as a ``[name, value]`` pair (how HTTP headers and query parameters are often
    listed: ``[["X-Api-Key", "..."]]``, ``[["auth", ["alice", "..."]]]``): its value's
    :func:`held_kind` under its name, ``DATA`` when it is no pair. The one rule of keys
    (``keys.py``: the value masked as a field of that name is), cassettes
    (``cassettes/redacting.py``) and stores (:func:`scrub_request`): each passes the parent,
    so a schema's ``"enum": ["token", "password"]`` is stored as it was sent."""
    if (len(node) == 2 and type(node[0]) is str and len(node[0]) <= PAIR_NAME_MAX
            and parent not in _SCHEMA_LISTS):
        return held_kind(node[0], node[1], secret)
    return DATA


# JSON Schema's keywords (2020-12, with OpenAPI's ``nullable``/``example``) and its type names.
_SCHEMA_WORDS: Final = frozenset({
    "$schema", "$id", "$ref", "$defs", "$comment", "$anchor", "definitions", "title",
    "description", "type", "format", "pattern", "enum", "const", "default", "examples",
    "example", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "items", "prefixItems", "additionalItems", "minItems",
    "maxItems", "uniqueItems", "contains", "properties", "patternProperties",
    "additionalProperties", "unevaluatedProperties", "unevaluatedItems", "required",
    "minProperties", "maxProperties", "propertyNames", "dependentRequired",
    "dependentSchemas", "anyOf", "oneOf", "allOf", "not", "if", "then", "else", "nullable",
    "deprecated", "readOnly", "writeOnly", "contentEncoding", "contentMediaType"})
_SCHEMA_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "object", "array",
                                  "null"})
#: Schema keywords that give values of what the schema describes: under a credential's name
#: they are values of the credential (a ``default`` or ``const`` may be the password itself).
SCHEMA_VALUES: Final = frozenset({"enum", "const", "default", "examples", "example"})


def is_schema(v: Any) -> bool:
    """Whether ``v``, met under a credential's name, is a JSON Schema describing the
    credential (a tool's ``"properties": {"api_key": {"type": "string"}}``), not its value:
    a dict of schema keywords only, with a JSON type or a subschema keyword. Written with
    every leaf hidden, a tool definition was stored as ``{"type": "<REDACTED>"}``, a request
    other than the one sent. A service account's ``{"type": "service_account", ...}`` is not
    one (no such JSON type, and keys no schema has)."""
    if type(v) is not dict or not v or not _SCHEMA_WORDS.issuperset(v):
        return False
    kind = v.get("type")
    if kind is None:
        return any(w in v for w in ("$ref", "anyOf", "oneOf", "allOf"))
    kinds = kind if type(kind) is list else [kind]
    return all(type(k) is str and k in _SCHEMA_TYPES for k in kinds) and bool(kinds)


def credential(v: Any, hide: Callable[[Any], Any], walk: Callable[[Any, str], Any]) -> Any:
    """``v``, held under a credential's name (a field or a ``[name, value]`` pair), as keys,
    stores and cassettes hold it: the one rule of all three. A JSON Schema describing the
    credential (:func:`is_schema`) keeps its structure, ``walk(value, field)`` writing it as
    ordinary data, but for the values it gives (:data:`SCHEMA_VALUES`); anything else is the
    credential at every depth, whatever its shape (``{"key": ...}``, ``["user", "pw"]``):
    each string and number leaf becomes ``hide(leaf)``, the shape stays (for diffs), and so
    do None and booleans (two values: hiding them hides nothing)."""
    if is_schema(v):
        return {k: hidden(x, hide) if k in SCHEMA_VALUES else walk(x, k) for k, x in v.items()}
    return hidden(v, hide)


def hidden(v: Any, hide: Callable[[Any], Any]) -> Any:
    """``v`` with every leaf but None and booleans through ``hide`` (see :func:`credential`);
    tuples become lists, as JSON writes them."""
    t = type(v)
    if t is dict:
        return {k: hidden(x, hide) for k, x in v.items()}
    if t is list or t is tuple:
        return [hidden(x, hide) for x in v]
    return v if v is None or t is bool else hide(v)


def _keyed(secret: str) -> str:
    return mask(secret)


_STORE_SCRUB = Scrubber(_keyed)


def scrub_request(canonical: bytes) -> bytes:
    """A canonical request as stores keep it (and miss reports print it): secret-shaped
    strings anywhere replaced by keyed masks. The key was computed before, from the form
    with credential *names* masked; shaped secrets are long random strings, so leaving them
    in the digest's input gives a dictionary attack nothing to work with."""
    vouched = _VOUCHED.pop(id(canonical), None)
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


# Canonical forms whose scrubbing can be answered without parsing them, by their identity
# (the entry keeps the bytes alive, so the id is not reused while it is here): id ->
# (the bytes, a check that they are canonical JSON scrubbing leaves as they are). Keys put a
# form here when they wrote a long conversation by parts; its run of messages already
# asked says which parts are new (a turn of a 1,000-message conversation parsed and walked
# all of it: 2.1 ms against the key's 0.15 ms floor). Bounded: a form not scrubbed soon
# (its call raised) is pushed out by later ones, and a form pushed out is scrubbed in full.
_VOUCHED: dict[int, tuple[bytes, Callable[[], bool], bytes]] = {}
_VOUCHED_MAX = 16


def vouch(canonical: bytes, check: Callable[[], bool], plain: bytes | None = None) -> None:
    """Let :func:`scrub_request` of this very ``canonical`` object ask ``check`` (True:
    canonical JSON that scrubbing leaves as it is) before parsing it. ``plain``: the same
    bytes without the None mark, when the caller has them (200 KB not copied again)."""
    if plain is None:
        plain = canonical[:-1] if canonical[-1:] == b" " else canonical
    while len(_VOUCHED) >= _VOUCHED_MAX:
        try:
            _VOUCHED.pop(next(iter(_VOUCHED)), None)
        except (StopIteration, RuntimeError):  # emptied or changed by another thread
            break
    _VOUCHED[id(canonical)] = (canonical, check, plain)


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
