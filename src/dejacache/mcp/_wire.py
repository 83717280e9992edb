"""The pure part of MCP recording: what names a server, what keys a request, what is stored.

An MCP call is keyed by the server's identity, the JSON-RPC method and its canonical params;
never by the JSON-RPC id, the progress token, the trace context, or the client library's
version (each changes from run to run, or with an upgrade that changes no answer). What is
stored is the answer as it came off the wire (``result`` or ``error``) and the progress
notifications the server sent for it, their token blanked so a replay can put in the token
of the request it answers.

Nothing here imports ``mcp`` or does I/O: the proxy (``_proxy.py``) feeds it dicts.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit

from .._core import volatile as _vol
from .._secrets import AUTH_QUERY, is_secret_name, name_forms
from ..keys import DEFAULT_VOLATILE, canonical_json, digest

__all__ = [
    "HANDSHAKE",
    "KIND",
    "Request",
    "call_name",
    "canonical",
    "classify",
    "http_identity",
    "progress_token",
    "recorded_notifications",
    "recording",
    "replayed_notifications",
    "stdio_identity",
]

KIND = "mcp"

# The messages that open a session: a server started late (a miss after hits, ``auto``) is
# sent them again before the call that missed, so it is in the state the session believes.
HANDSHAKE = frozenset({"initialize", "server/discover", "notifications/initialized"})

_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


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


def stdio_identity(command: str, args: Sequence[str], cwd: str | None = None) -> dict[str, Any]:
    """A stdio server: the command's file name and its arguments. The environment is left
    out (it carries the tokens), and so is where the interpreter or checkout lives."""
    roots = [(os.getcwd(), "."), (os.path.expanduser("~"), "~")]
    out: dict[str, Any] = {
        "transport": "stdio",
        "command": pathlib.PurePath(command).name or command,
        "args": [_portable(str(a), roots) for a in args],
    }
    if cwd is not None:
        out["cwd"] = _portable(os.fspath(cwd), roots)
    return out


def http_identity(url: str, transport: str) -> dict[str, Any]:
    """An HTTP server: its URL without user, password or credential-named query parameters.
    A loopback server's port is left out, as HTTP keys leave out the host: a test server
    gets a fresh port on every run."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and host not in _LOOPBACK:
        netloc += f":{port}"
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if AUTH_QUERY.isdisjoint(name_forms(k)) and not is_secret_name(k)]
    clean = SplitResult(parts.scheme, netloc, parts.path, urlencode(query), "")
    return {"transport": transport, "url": clean.geturl()}


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
    canon = canonical_json(data, volatile=DEFAULT_VOLATILE | spec.names,
                           volatile_paths=spec.paths, volatile_patterns=spec.patterns,
                           function=KIND, substitutions=substitutions)
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
