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

This module holds the rules (which names, pairs and URLs hold a credential) and what a key
asks on every call; the masking itself (secret-shaped text, URL queries, the masking key, the
stores' scrubbing) is ``_secret_masks``, loaded the first time one of its names is read from
here. A replay hit masks nothing, and those ~500 lines cost its process ~1M instructions.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence

from ._lazy import pattern, served

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, AnyStr, Final

    from ._secret_masks import (
        MASK_RE,
        SECRET_PATTERNS,
        Scrubber,
        find_secrets,
        guarded,
        key_loaded,
        key_path,
        keyed_digest,
        mask,
        mask_text,
        mask_url_queries,
        may_be_secret,
        scrub_invariant,
        scrub_request,
        secret_key,
        shapes_in,
        with_secrets,
    )

__all__ = [
    "AUTH_PAIR_NAMES",
    "AUTH_QUERY",
    "BASIC",
    "BYTES_TAG",
    "CREDENTIAL",
    "DATA",
    "MASK_PREFIX",
    "MASK_RE",
    "NAME_HINTS",
    "PAIR_NAME_MAX",
    "PLACEHOLDER",
    "SECRET_NAMES",
    "SCHEMA_VALUES",
    "SECRET_PATTERNS",
    "SENSITIVE_HEADERS",
    "SESSION_QUERY",
    "URL_BYTES",
    "URL_TEXT",
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
    "key_path",
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
    "params_may",
    "placeholder",
    "scrub_request",
    "secret_key",
    "scrub_invariant",
    "shapes_in",
    "take_vouched",
    "url_may_hold_secret",
    "userinfo_may",
    "value_kind",
    "vouch",
    "with_secrets",
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


#: One kind of secret-shaped string: its name, substrings every match contains, its regex.
Shape = tuple[str, tuple[str, ...], "re.Pattern[str]"]


@functools.cache
def _hump() -> re.Pattern[str]:
    # Apart from the others: every cached call checks its argument names, few mask text.
    return re.compile(_HUMP)


# Where a credential of a URL may be, one rule for keys (canonical JSON bytes), masks and
# ``guarded`` (text): the parameters of a query or a fragment (``?api_key=``,
# ``#access_token=``) of a URL of any scheme or a relative one (read from its first ``/``), and
# a userinfo password (``://user:pw@``, the "url password" shape). A string without the
# characters these need skips the patterns: a few memchr-speed ``in`` checks, ``=`` first
# (rare in chat text), and the multi-byte ``://`` last, only once an ``@`` is there (``://``
# is a ~1 GB/s search: 0.7 ms of a 1 MB request, when the one-byte checks cost microseconds).
URL_TEXT: Final = ("=", "/", "?", "#", "@", "://")
URL_BYTES: Final = tuple(n.encode() for n in URL_TEXT)


def params_may(s: AnyStr, n: tuple[AnyStr, ...]) -> bool:
    """Whether ``s`` may hold a URL's query or fragment parameter."""
    return n[0] in s and n[1] in s and (n[2] in s or n[3] in s)


def userinfo_may(s: AnyStr, n: tuple[AnyStr, ...]) -> bool:
    return n[4] in s and n[5] in s


def url_may_hold_secret(data: bytes) -> bool:
    """Whether canonical JSON ``data`` may hold a credential :func:`mask_url_queries` masks:
    False means it holds none (then masking leaves it as it is). True of bytes when it is
    of any bytes they are cut into: each URL lies inside one JSON string."""
    return params_may(data, URL_BYTES) or userinfo_may(data, URL_BYTES)


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


def take_vouched(canonical: bytes) -> tuple[bytes, Callable[[], bool], bytes] | None:
    """What :func:`vouch` left for this very ``canonical`` object (taken: asked once)."""
    return _VOUCHED.pop(id(canonical), None)


_MASKS = ("MASK_RE", "SECRET_PATTERNS", "Scrubber", "find_secrets", "guarded", "key_loaded",
          "key_path", "keyed_digest", "mask", "mask_text", "mask_url_queries", "may_be_secret",
          "scrub_invariant", "scrub_request", "secret_key", "shapes_in", "with_secrets")
__getattr__ = served(__name__, dict.fromkeys(_MASKS, "dejacache._secret_masks"))
