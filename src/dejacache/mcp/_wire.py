"""The pure part of MCP recording: what names a server, what keys a request, what is stored.

An MCP call is keyed by the server's identity, the JSON-RPC method and its canonical params;
never by the JSON-RPC id, the progress token, the trace context, or the client library's
version (each changes from run to run, or with an upgrade that changes no answer). What is
stored is the answer as it came off the wire (``result`` or ``error``) and the progress
notifications the server sent for it, their token blanked so a replay can put in the token
of the request it answers; for a ``subscriptions/listen`` stream, its acknowledgement.

Also here: which requests are answered by content rather than by occurrence
(:func:`by_content`), how long a store that answers by key may keep a 2026-07-28 answer
(:func:`hinted_ttl`), credentials hidden from a server's identity (:func:`hidden_args`)
and named as who is asking (:func:`http_credentials`, :func:`stdio_credentials`), what a
stdio launch's ``env=`` says (:func:`stdio_env`: credentials, per-run directories,
settings), and how a path a run made is keyed, in ``env=`` and arguments alike
(:func:`_per_run`: its run's directory as ``<tmp>``, which file it is as itself).

Nothing here imports ``mcp`` or does I/O: the proxy (``_proxy.py``) feeds it dicts.
"""

from __future__ import annotations

import functools
import os
import pathlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, NamedTuple
from urllib.parse import SplitResult, parse_qsl, quote, urlencode, urlsplit

import orjson

from .._core import volatile as _vol
from .._secrets import is_auth_query, is_secret_name, mask_text
from ..keys import DEFAULT_VOLATILE, canonical_json, digest, kept_out, telemetry_names

__all__ = [
    "ACKNOWLEDGED",
    "EnvParts",
    "HANDSHAKE",
    "KIND",
    "LISTEN",
    "NO_ENV",
    "REDACTED",
    "Request",
    "TEMP",
    "by_content",
    "call_name",
    "canonical",
    "classify",
    "digest_of",
    "hidden_args",
    "hidden_url",
    "hinted_ttl",
    "http_credentials",
    "http_identity",
    "http_scope",
    "progress_token",
    "recorded_ack",
    "recorded_notifications",
    "recording",
    "replayed_ack",
    "replayed_notifications",
    "stdio_credentials",
    "stdio_env",
    "stdio_identity",
    "stdio_scope",
    "subscription_of",
]

KIND = "mcp"

# The messages that open a session: a server started late (a miss after hits, ``auto``) is
# sent them again before the call that missed, so it is in the state the session believes.
HANDSHAKE = frozenset({"initialize", "server/discover", "notifications/initialized"})

# Requests the client makes on its own, as often as timing has it: ``ClientSession`` lists
# the tools to validate the first result of a tool it has not seen listed (three gathered
# calls list one to three times, as their answers and the first listing cross), and
# keep-alive pings. Their count is not the program's, so they are answered by content.
_SESSION_MADE = frozenset({"ping", "tools/list"})

# 2026-07-28: a ``subscriptions/listen`` request's answer is a stream; its first frame, the
# acknowledgement, carries the request's id under this ``_meta`` key, as every later frame.
LISTEN: Final = "subscriptions/listen"
ACKNOWLEDGED: Final = "notifications/subscriptions/acknowledged"
_SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
# Only a 2026-07-28 request carries its protocol version in ``_meta``; its answers' cache
# hints count (the SDK's rule: a handshake-era peer's ``ttlMs`` is not a hint).
_VERSION = "io.modelcontextprotocol/protocolVersion"
# The SDK's cap on any cache entry (``mcp.client.caching.MAX_TTL_MS``): 24 hours.
_MAX_TTL = 24 * 3600.0

_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
#: What a credential in a server's plain identity becomes: its value is who is asking, a
#: keyed digest beside it (:func:`stdio_credentials`), as HTTP keys ``Authorization``.
REDACTED: Final = "<REDACTED>"
_USERINFO = re.compile(r"(?<=://)([^/?#@\s]+)@")


def recording(eff: Any) -> bool:
    """Whether MCP calls made under ``eff`` (settings) are recorded and replayed: inside a
    test-facing block that caches, as for HTTP interception."""
    return bool(eff.test_facing) and eff.namespace is not None and eff.mode != "off"


# ---------------------------------------------------------------- server identity


def _portable(arg: str, roots: Sequence[tuple[str, str]]) -> str:
    """An argument that is a path under the working directory or the home directory, written
    relative to it: a checkout in another place (CI) names the same server."""
    for root, label in roots:
        if root and (arg == root or arg.startswith(root + os.sep)):
            return label + arg[len(root):]
    return arg


def _redact(_: str) -> str:
    return REDACTED


def hidden_url(url: str, hide: Callable[[str], str]) -> str:
    """``url`` (or any text holding URLs) with user and password, credential query values
    and secret-shaped strings passed through ``hide``."""
    url = mask_text(url, hide)  # first: a URL is matched up to a ``<``, as a mask has
    if "@" in url:
        url = _USERINFO.sub(lambda m: hide(m.group(1)) + "@", url)
    return url


def _secret_flag(arg: str) -> bool:
    name = arg.lstrip("-")
    return arg.startswith("-") and bool(name) and is_secret_name(name)


def hidden_args(args: Sequence[str], hide: Callable[[str], str]) -> list[str]:
    """A command line with its credentials passed through ``hide``: the value of
    ``--token=V``, ``API_KEY=V`` or of the argument after ``--api-key``, and secret-shaped
    strings or credentials in URLs anywhere."""
    out: list[str] = []
    after_flag = False
    for arg in args:
        if after_flag and not arg.startswith("-"):
            out.append(hide(arg))
            after_flag = False
            continue
        name, eq, value = arg.partition("=")
        after_flag = not eq and _secret_flag(arg)
        if eq and value and name.lstrip("-") and is_secret_name(name.lstrip("-")):
            out.append(f"{name}={hide(value)}")
        else:
            out.append(hidden_url(arg, hide))
    return out


def stdio_identity(command: str, args: Sequence[str], cwd: str | None = None,
                   settings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A stdio server as keys name it in plain: the command's file name and its arguments,
    credentials :data:`REDACTED` (they are who is asking: :func:`stdio_credentials`), paths
    a run made in them and in its ``cwd`` spelt by :func:`_per_run`, and the settings of its
    ``env=`` (``stdio_env(env).settings``), only when it has some. Where the interpreter or
    checkout lives is left out, and so is the inherited environment."""
    roots = _portable_roots()
    made = _per_run_reader()
    out: dict[str, Any] = {
        "transport": "stdio",
        "command": pathlib.PurePath(command).name or command,
        "args": hidden_args([_portable(_spelt(str(a), made), roots) for a in args], _redact),
    }
    if cwd is not None:
        out["cwd"] = _portable(_spelt(os.fspath(cwd), made), roots)
    if settings:
        out["env"] = {name: _portable(value, roots) for name, value in settings.items()}
    return out


def _portable_roots() -> list[tuple[str, str]]:
    return [(os.getcwd(), "."), (os.path.expanduser("~"), "~")]


def _holds_secret(value: str) -> bool:
    """Whether ``value`` is, or holds, a credential by its shape (a key, a token, a URL's
    password or credential query value): what :func:`hidden_url` hides."""
    return hidden_url(value, _redact) != value


# A URL naming a local file (``file:///tmp/x``, ``sqlite:////tmp/x.db?mode=ro``): its path,
# then its query or fragment, which say more than where the file is.
_LOCAL_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://(?:localhost)?(/[^?#]*)(.*)", re.DOTALL)


def _temp_roots() -> tuple[str, ...]:
    """The directories a run's own files are made under: ``tempfile``'s, ``/tmp``,
    ``$TMPDIR`` and pytest's root for its ``tmp_path`` directories; the deepest first (a
    ``$TMPDIR`` inside ``/tmp`` is where this run's directories are made)."""
    import tempfile  # here: a launch naming a path is the only reader

    return _resolved((tempfile.gettempdir(), "/tmp", os.environ.get("TMPDIR"),
                      os.environ.get("PYTEST_DEBUG_TEMPROOT")))


# Four realpath calls cost ~27 µs of a launch's ~45 µs: made once per spelling of the roots.
@functools.lru_cache(maxsize=8)
def _resolved(given: tuple[str | None, ...]) -> tuple[str, ...]:
    """``given``'s absolute directories, each as given and with its links resolved (macOS's
    ``/var/folders/...`` is ``/private/var/folders/...``, and pytest resolves it), longest
    first. A file system's root is never one: every path under it would be per-run."""
    roots = set()
    for root in given:
        if root and os.path.isabs(root):
            for form in (os.path.normpath(root), os.path.realpath(root)):
                if os.path.dirname(form) != form:
                    roots.add(form)
    return tuple(sorted(roots, key=lambda r: (-len(r), r)))


def _under(path: str, roots: Iterable[str]) -> bool:
    """Whether ``path`` is strictly below one of ``roots``, read lexically (``..`` taken
    out, no link followed): the root itself is the same directory on every run."""
    if not os.path.isabs(path):
        return False
    path = os.path.normpath(path)
    return any(path.startswith(root + os.sep) for root in roots)


def _checkout(roots: tuple[str, ...]) -> frozenset[str]:
    """The working directory, as given and resolved, when it lies inside a temp directory
    (a CI clone in ``/tmp``): its files are the project's, the same on every run, not ones
    the run made. Nothing when it is a temp directory itself or holds one (``/``, ``/tmp``):
    then every temp path would be the project's."""
    try:
        cwd = os.getcwd()
    except OSError:  # (a working directory removed under the process)
        return frozenset()
    return _checkout_at(cwd, roots)


# Its realpath call is ~10 µs of a launch's: made once per working directory.
@functools.lru_cache(maxsize=8)
def _checkout_at(cwd: str, roots: tuple[str, ...]) -> frozenset[str]:
    forms = frozenset({os.path.normpath(cwd), os.path.realpath(cwd)})
    if any(r == f or r.startswith(f.rstrip(os.sep) + os.sep) for r in roots for f in forms):
        return frozenset()
    return forms


#: What a directory a run made is keyed as, in a launch's arguments and ``env=``.
TEMP: Final = "<tmp>"


@functools.cache
def _run_dir() -> re.Pattern[str]:
    """The directory a run makes below a temp root, matched where the root ends: pytest's
    session directory (``pytest-of-USER/pytest-N``), an xdist worker's in it
    (``popen-gwK``) and a test's own (``tmp_path``: ``NAME0``, its ``name`` kept and its
    number not, since pytest numbers a directory by how many before it in that session
    shared its name's first 30 characters, which scheduling and ``-k`` decide), or
    ``tempfile``'s (``tmpXXXXXXXX``). The shapes are the ones ``learn`` masks in text."""
    from .._core.shapes import MKDTEMP_RUN, PYTEST_RUN  # here: a launch naming a path

    sep = re.escape(os.sep)
    pytest = PYTEST_RUN.replace("/", sep)
    return re.compile(rf"{pytest}(?:{sep}popen-gw\d+)?(?:{sep}(?P<name>[^{sep}]+?)\d+"
                      rf"(?={sep}|$))?|{MKDTEMP_RUN}")


class _PerRun(NamedTuple):
    """A value naming files a run made (:func:`_per_run`)."""

    spelling: str  # as keyed: each run's directory written TEMP, what follows it kept
    whole: bool  # it is such directories, nothing below them: keyed as before (stdio_env)
    dirs: tuple[str, ...]  # the run's directories: who is asking, mapped in a replay


def _per_run_path(path: str, roots: tuple[str, ...], checkout: frozenset[str]
                  ) -> _PerRun | None:
    if not os.path.isabs(path):
        return None
    path = os.path.normpath(path)
    if path in checkout or _under(path, checkout):
        return None
    for root in roots:
        if path.startswith(root + os.sep):
            run = _run_dir().match(path, len(root) + 1)
            if run is not None:
                name = run.group("name")
                spelt = TEMP + os.sep + name if name else TEMP
                return _PerRun(spelt + path[run.end():], run.end() == len(path),
                               (path[:run.end()],))
    return None


def _per_run(value: str, roots: tuple[str, ...], checkout: frozenset[str]) -> _PerRun | None:
    """``value`` as keys spell it when it names files this run made, else None: the one
    rule for a launch's arguments and its ``env=``.

    Only the directory a run made differs from run to run (:func:`_run_dir`, below a temp
    directory, :func:`_temp_roots`, and not in the working directory, :func:`_checkout`):
    it is written :data:`TEMP`. What follows it (a file's name, sub-directories) says which
    file, and is keyed as itself: ``<tmp>/eu.json`` never stands for ``<tmp>/us.json``. A
    path in a temp directory of no such shape (``/tmp/eu.json``, ``/tmp/app/data``) is the
    same path on every run, keyed as it is. ``value`` may be a path, a local URL of one
    (``file:///tmp/...``), an ``os.pathsep`` list, or either after ``NAME=``
    (``--db=/tmp/...``)."""
    url = _LOCAL_URL.fullmatch(value)
    if url is not None:
        found = _per_run_path("/" + url.group(1).lstrip("/"), roots, checkout)
        return found and _PerRun(value[:url.start(1)] + found.spelling + url.group(2),
                                 found.whole and not url.group(2), found.dirs)
    if "://" in value:  # another host's URL
        return None
    name, eq, rest = value.partition("=")
    if eq and name and os.sep not in name:
        found = _per_run(rest, roots, checkout)
        return found and _PerRun(f"{name}={found.spelling}", False, found.dirs)
    parts = value.split(os.pathsep)
    made = [_per_run_path(part, roots, checkout) for part in parts]
    if not any(made):
        return None
    spelling = os.pathsep.join(m.spelling if m else p for m, p in zip(made, parts, strict=True))
    return _PerRun(spelling, all(m is not None and m.whole for m in made),
                   tuple(d for m in made if m for d in m.dirs))


def _per_run_reader() -> Callable[[str], _PerRun | None]:
    """:func:`_per_run` with this moment's temp directories and working directory, read
    when a value first names a path (most launches name none)."""
    where: tuple[tuple[str, ...], frozenset[str]] | None = None

    def read(value: str) -> _PerRun | None:
        nonlocal where
        if os.sep not in value:
            return None
        if where is None:
            roots = _temp_roots()
            where = roots, _checkout(roots)
        return _per_run(value, *where)

    return read


def _spelt(value: str, made: Callable[[str], _PerRun | None]) -> str:
    found = made(value)
    return value if found is None else found.spelling


class EnvParts(NamedTuple):
    """A launch's ``env=`` as keys take it (:func:`stdio_env`)."""

    credentials: tuple[tuple[str, str], ...]  # ``(env:NAME, value)``: who is asking
    per_run: Mapping[str, str]  # the run's directories each names: mapped in a replay
    settings: Mapping[str, str]  # anything else: keyed as itself, a file a run made spelt


NO_ENV: Final = EnvParts((), MappingProxyType({}), MappingProxyType({}))


def stdio_env(env: Mapping[str, str] | None) -> EnvParts:
    """The one rule for a stdio launch's ``env=`` (never the inherited environment):

    * a credential (its name says so, or its value holds one by its shape) is who is asking,
      an identity item of its own (``env:NAME``) that a replay's other key maps onto;
    * a directory a run makes afresh (a pytest ``tmp_path``, a ``mkdtemp``) differs on
      every run but says nothing about the answer: such directories together are one item
      (``env``), mapped onto the recording's as a credential is;
    * anything else is a setting (``REGION=eu``, ``MODEL``, ``DEBUG=1``): what is asked,
      keyed in plain as itself, never stood for by another value: ``REGION=us`` replaying
      ``eu``'s answers is a wrong answer, where a miss is only a miss. A file or a
      directory below a run's directory is a setting spelt by :func:`_per_run`
      (``DATA=<tmp>/eu.json``), its run's directory in the item: the same file in another
      run's directory replays, another file misses.

    A path outside the temp directories (``CONFIG=~/app/eu.toml``, ``/etc/app/us.toml``), or
    in the working directory (a checkout CI clones into ``/tmp``), is a setting too: it names
    the same file on every run, and another file may answer otherwise. Under the working or
    the home directory it is keyed relative to it, as arguments are, so a checkout elsewhere
    (CI) names the same server."""
    if not env:
        return NO_ENV
    credentials: list[tuple[str, str]] = []
    per_run: dict[str, str] = {}
    settings: dict[str, str] = {}
    made = _per_run_reader()
    for name, value in sorted(env.items()):
        if is_secret_name(name) or _holds_secret(value):
            credentials.append((f"env:{quote(name, safe='')}", value))
            continue
        found = made(value)
        if found is None:
            settings[name] = value
        elif found.whole:  # (as before files were told apart: such recordings replay)
            per_run[name] = value
        else:
            settings[name] = found.spelling
            per_run[name] = os.pathsep.join(found.dirs)
    return EnvParts(tuple(credentials), per_run, settings)


def stdio_credentials(args: Sequence[str], env: EnvParts = NO_ENV, cwd: str | None = None
                      ) -> tuple[tuple[str, str], ...]:
    """Who a stdio launch says is asking, as identity pairs: the n-th credential of its
    command line (``arg:N``, what :func:`hidden_args` hides), each credential of its
    ``env=`` (``env:NAME``), the run's directories its ``env=`` names, together (``env``,
    as :func:`stdio_env` parts it), and those its command line and ``cwd`` name
    (``paths``). Its settings are not here: they are keyed in plain
    (:func:`stdio_identity`), paths spelt ``<tmp>/...``, so a runtime cache (each item as
    itself) never shares one run's files with another's, where a replay maps them."""
    found: list[str] = []

    def note(value: str) -> str:
        found.append(value)
        return REDACTED

    hidden_args([str(a) for a in args], note)
    pairs = [(f"arg:{n}", value) for n, value in enumerate(found, 1)]
    pairs += env.credentials
    if env.per_run:
        pairs.append(("env", orjson.dumps(dict(env.per_run)).decode()))
    made = _per_run_reader()
    named = [*map(str, args), *([] if cwd is None else [os.fspath(cwd)])]
    dirs = [d for value in named if (run := made(value)) for d in run.dirs]
    if dirs:
        pairs.append(("paths", orjson.dumps(dirs).decode()))
    return tuple(pairs)


def stdio_scope(server: Mapping[str, Any]) -> str:
    """Where a stdio launch's credentials apply, as identity items name it: ``mcp.stdio.``,
    the command's name and a digest of its plain identity (``stdio_identity``), so two
    servers run by one interpreter map a replay's credentials each on its own."""
    whole = orjson.dumps(dict(server), option=orjson.OPT_SORT_KEYS)
    return f"{KIND}.stdio.{quote(str(server['command']), safe='')}.{digest_of(whole)[:8]}"


def _secret_query(name: str) -> bool:
    return is_auth_query(name) or is_secret_name(name)


def _host(parts: SplitResult) -> str:
    """Host and port as an identity names them: a loopback server's port left out."""
    host = parts.hostname or ""
    port = parts.port
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and host not in _LOOPBACK:
        netloc += f":{port}"
    return netloc


def http_identity(url: str, transport: str) -> dict[str, Any]:
    """An HTTP server: its URL without its credentials (:func:`http_credentials`: a
    userinfo password, credential-named query parameters). A user name is kept: it is
    who the URL names, not a secret. A loopback server's port is left out, as HTTP keys
    leave out the host: a test server gets a fresh port on every run."""
    parts = urlsplit(url)
    user = parts.username
    netloc = _host(parts)
    if user:
        netloc = f"{user}@{netloc}"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if not _secret_query(k)]
    clean = SplitResult(parts.scheme, netloc, parts.path, urlencode(query), "")
    return {"transport": transport, "url": clean.geturl()}


def http_credentials(url: str) -> tuple[tuple[str, str], ...]:
    """Who a server's URL says is asking: its credential query values and userinfo
    password as identity pairs (``query:NAME``, ``password:USER``), as HTTP keys them
    (``http.exchange.query_identity``); a server whose answers depend on its caller (a
    gateway scoping tools and data by ``?token=``) is another server for each caller."""
    parts = urlsplit(url)
    found: list[tuple[str, str]] = []
    if parts.query:
        from ..http.exchange import query_identity  # only for a URL with a query

        found += query_identity(parse_qsl(parts.query, keep_blank_values=True),
                                _secret_query)
    if parts.password:
        found.append((f"password:{quote(parts.username or '', safe='')}", parts.password))
    return tuple(found)


def http_scope(url: str) -> str:
    """Where a server's credentials apply, as identity items name it: ``mcp.`` and its
    host and path (``mcp.127.0.0.1/mcp``); one spelling token, as an item needs."""
    parts = urlsplit(url)
    return f"{KIND}.{_host(parts)}{quote(parts.path)}"


# ---------------------------------------------------------------- messages


class Request:
    """One client request as the proxy saw it: its id (to answer), method and params."""

    __slots__ = ("id", "method", "params")

    def __init__(self, id: Any, method: str, params: Mapping[str, Any] | None) -> None:
        self.id = id
        self.method = method
        self.params = dict(params) if params is not None else None


def classify(data: Mapping[str, Any]) -> str:
    """``request``, ``notification``, ``response`` or ``error`` for a JSON-RPC message."""
    if "method" in data:
        return "request" if data.get("id") is not None else "notification"
    return "error" if "error" in data else "response"


def progress_token(params: Mapping[str, Any] | None) -> Any:
    meta = (params or {}).get("_meta")
    if isinstance(meta, Mapping):
        token = meta.get("progressToken")
        if isinstance(token, (str, int)) and not isinstance(token, bool):
            return token
    return None


def by_content(method: str, params: Mapping[str, Any] | None) -> bool:
    """Whether a request is one the client makes on its own, as often as timing has it
    (listing the tools to validate results, pings): answered by its content, never a miss
    for being made more often than when it was recorded."""
    return method in _SESSION_MADE and not (params or {}).get("cursor")


def digest_of(data: bytes) -> str:
    """A server identity's digest (32 hex characters), as a key is made."""
    return digest("", f"{KIND}.server", data)


def unordered_names() -> frozenset[str]:
    """The call names of the requests a session makes on its own (:func:`by_content`): a
    cassette keeps them outside its recorded order, since when they come is the server's
    timing (``Cassette.unordered``)."""
    return frozenset(call_name(m) for m in _SESSION_MADE)


def call_name(method: str) -> str:
    """The call's name in the cassette and the stats: ``mcp.tools/call``."""
    return f"{KIND}.{method}"


def _keyed_params(params: Mapping[str, Any] | None) -> Any:
    if params is None:
        return None
    out = dict(params)
    meta = out.get("_meta")
    if isinstance(meta, Mapping):
        meta = {k: v for k, v in meta.items() if k != "progressToken"}
        info = meta.get(_CLIENT_INFO)
        if isinstance(info, Mapping):
            meta[_CLIENT_INFO] = {k: v for k, v in info.items() if k != "version"}
        if meta:
            out["_meta"] = meta
        else:
            del out["_meta"]
    info = out.get("clientInfo")  # the initialize handshake's
    if isinstance(info, Mapping):
        out["clientInfo"] = {k: v for k, v in info.items() if k != "version"}
    return out


def canonical(
    namespace: str,
    server: Mapping[str, Any],
    method: str,
    params: Mapping[str, Any] | None,
    volatile: tuple[Any, ...] = (),
    substitutions: tuple[tuple[bytes, bytes], ...] = (),
) -> tuple[str, bytes]:
    """``(key, canonical bytes)`` of one request to ``server``. ``volatile``: the block's
    volatile names, paths (rooted at ``params``: ``params.arguments.when``) and patterns."""
    spec = _vol.parse(volatile)
    data = {"server": dict(server), "method": method, "params": _keyed_params(params)}
    names = kept_out(DEFAULT_VOLATILE | spec.names, spec.keep)
    # A tool's own ``trace_id`` argument is keyed; ``params._meta``'s is telemetry.
    canon = canonical_json(data, volatile=names, volatile_paths=spec.paths,
                           volatile_patterns=spec.patterns, function=KIND,
                           substitutions=substitutions,
                           telemetry=telemetry_names(names, spec.keep))
    return digest(namespace, call_name(method), canon), canon


def recorded_notifications(notes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Progress notifications as stored: the request's token blanked."""
    out = []
    for n in notes:
        params = dict(n.get("params") or {})
        params.pop("progressToken", None)
        out.append({"method": n["method"], "params": params})
    return out


def replayed_notifications(stored: Any, token: Any) -> list[dict[str, Any]]:
    """The stored notifications to send before a replayed answer, carrying ``token``; none
    when the request asked for no progress."""
    if token is None or not isinstance(stored, list):
        return []
    return [{"jsonrpc": "2.0", "method": n["method"],
             "params": {**n.get("params", {}), "progressToken": token}}
            for n in stored if isinstance(n, Mapping) and isinstance(n.get("method"), str)]


# ---------------------------------------------------------------- subscriptions/listen


def subscription_of(data: Mapping[str, Any]) -> Any:
    """The ``subscriptions/listen`` request a server frame belongs to (its id), or None."""
    meta = (data.get("params") or {}).get("_meta")
    return meta.get(_SUBSCRIPTION_ID) if isinstance(meta, Mapping) else None


def recorded_ack(params: Mapping[str, Any]) -> dict[str, Any]:
    """A listen's acknowledgement as stored: its params without the request's id."""
    out = dict(params)
    meta = out.get("_meta")
    if isinstance(meta, Mapping):
        meta = {k: v for k, v in meta.items() if k != _SUBSCRIPTION_ID}
        if meta:
            out["_meta"] = meta
        else:
            del out["_meta"]
    return out


def replayed_ack(stored: Mapping[str, Any], request_id: Any) -> dict[str, Any]:
    """The stored acknowledgement as sent to the client: stamped with its request's id."""
    meta = stored.get("_meta")
    meta = {**(meta if isinstance(meta, Mapping) else {}), _SUBSCRIPTION_ID: request_id}
    return {"jsonrpc": "2.0", "method": ACKNOWLEDGED, "params": {**stored, "_meta": meta}}


# ---------------------------------------------------------------- 2026-07-28 cache hints


def hinted_ttl(params: Mapping[str, Any] | None, value: Mapping[str, Any]) -> float | None:
    """How long a store that answers by key (a cache, not a recording) may keep ``value``,
    the answer to a request with ``params``: None when the answer carries no cache hint
    (kept as any other), else the server's ``ttlMs`` in seconds, 0 for not at all. A
    ``"private"`` answer is not kept either: a key holds only the credentials the session
    was opened with (``_callers``), not a token an auth flow fetches later, so keeping it
    could share it across callers."""
    meta = (params or {}).get("_meta")
    if not isinstance(meta, Mapping) or not meta.get(_VERSION):
        return None
    result = value.get("result")
    if not isinstance(result, Mapping) or "ttlMs" not in result:
        return None
    ttl = result["ttlMs"]
    if result.get("cacheScope") != "public" or not isinstance(ttl, int) or ttl <= 0:
        return 0.0
    return min(ttl / 1000, _MAX_TTL)
