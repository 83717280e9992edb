"""Which server a session talks to, as ``mcp_tool_cache`` names it in keys and counters.

A server's name is not its identity: every ``MCPServer()`` built without one reports
``"mcp-server"``, and two of them sharing a cache answered each other's calls. The identity
is the **connection** (command and arguments for stdio, the URL for HTTP) **plus** the name
and version the server gave in its handshake, so a server redeployed under a new version
starts a cache of its own.

Where the connection comes from: ``server=`` (a URL, ``StdioServerParameters`` or a label the
caller vouches for), else what an ``mcp.Client`` was built with. A ``ClientSession`` does not
know what it was opened over (its transport yields only a pair of streams), so without
``server=`` its identity is the session object itself: its cache is its own, never another
server's, and goes with it (:attr:`Identity.owner`). The same holds for an in-process server
or a ``Transport`` object.

Credentials never reach a key, a store or a log as they are: a URL's user and password and
credential query values are replaced by their keyed masks (``_secrets.mask``: different
credentials, different identities); a stdio launch's credential arguments (``--token V``,
``API_KEY=V``, secret-shaped strings), its ``env=``'s credentials and its per-run temp
directories are who is asking, keyed digests as a recording keys them, and its ``env=``'s
other settings (``REGION=eu``, a file in a per-run directory as ``<tmp>/eu.json``) are keyed
in plain (``_callers.stdio_launch``, ``_wire.stdio_env``; the inherited environment is never
read).
What keys and counters carry is a digest of all that; the name shown in metrics is the
server's name or a label, a host, a command's file name. The live values are kept beside it,
in memory (:attr:`Identity.callers`), so a result that quotes one is stored without it.
"""

from __future__ import annotations

import pathlib
import uuid
import weakref
from typing import Any
from urllib.parse import urlsplit

import orjson

from .._secrets import mask
from . import _wire

__all__ = ["Identity", "connection_of", "handshake_of", "identify", "inner_session"]

_TOKENS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _token(obj: Any) -> str:
    """A name for ``obj`` for as long as it lives, never another's: random, not its id (an
    id is reused in this process, a counter in the next one sharing a Redis store)."""
    try:
        found = _TOKENS.get(obj)
        if found is None:
            found = _TOKENS[obj] = f"{type(obj).__qualname__}-{uuid.uuid4().hex}"
        return found
    except TypeError:  # not weakly referable: a name of its own, for this wrapper only
        return f"{type(obj).__qualname__}-{uuid.uuid4().hex}"


def _is_client(session: Any) -> bool:
    """``mcp.Client`` (mcp 2): it knows what it was built to connect to."""
    try:
        from mcp import Client
    except ImportError:  # mcp 1.x: sessions only
        return False
    return isinstance(session, Client)


def inner_session(session: Any) -> Any:
    """The ``ClientSession`` under ``session`` (an ``mcp.Client``'s, once it is entered)."""
    if _is_client(session):
        try:
            return session.session
        except RuntimeError:  # not entered yet
            return None
    return session


def handshake_of(session: Any) -> Any:
    """The result of the session's handshake (``initialize`` or 2026-07-28 ``discover``),
    the object itself: another one means the session connected again."""
    inner = inner_session(session)
    for attr in ("initialize_result", "discover_result"):
        result = getattr(inner, attr, None)
        if result is not None:
            return result
    return None


def connection_of(session: Any, server: Any) -> tuple[dict[str, Any], Any]:
    """The connection ``session`` talks over (``server``: the caller's ``server=``), and
    the object it is named after when it can only be named after one (else None)."""
    connection, owner, _ = _connection(session, server)
    return connection, owner


def _connection(session: Any, server: Any) -> tuple[dict[str, Any], Any, Any]:
    """:func:`connection_of`, and who it says is asking (``_callers.Callers``)."""
    from ._callers import NOBODY, callers_of

    if server is None and _is_client(session):
        server = session.server
    if server is None:
        return {"session": _token(session)}, session, NOBODY
    if isinstance(server, str):
        if "://" in server:
            return {"url": _wire.hidden_url(server, mask)}, None, callers_of(server)
        return {"label": server}, None, NOBODY
    command = getattr(server, "command", None)
    if isinstance(command, str):  # StdioServerParameters
        connection, callers = _stdio(server, command)
        return connection, None, callers
    return {"object": _token(server)}, server, NOBODY  # in-process, a Transport object


def _stdio(params: Any, command: str) -> tuple[dict[str, Any], Any]:
    """A stdio launch as recordings name it (``_callers.stdio_launch``), its credentials
    and ``env=`` as the digests a key outside a block holds; and who launched it."""
    from ._callers import as_sent, stdio_launch

    cwd = getattr(params, "cwd", None)
    server, callers = stdio_launch(command, [str(a) for a in getattr(params, "args", ())],
                                   getattr(params, "env", None),
                                   None if cwd is None else str(cwd))
    if callers.items:
        server = {**server, "identity": as_sent(callers.items)}
    return server, callers


class Identity:
    """A server as keys name it (:attr:`key`, a digest) and as people read it (:attr:`name`);
    :attr:`owner`: the object a server known by no connection is named after, whose cache
    must go when it goes (None: a server any session may name); :attr:`callers`: who its
    connection says is asking (``_callers.Callers``: the live credentials, never stored)."""

    __slots__ = ("callers", "key", "name", "owner")

    def __init__(self, key: str, name: str, owner: Any = None, callers: Any = None) -> None:
        from ._callers import NOBODY

        self.key, self.name, self.owner = key, name, owner
        self.callers = NOBODY if callers is None else callers


def _server_info(session: Any) -> Any:
    inner = inner_session(session)
    info = getattr(inner, "server_info", None)
    for attr in ("initialize_result", "discover_result"):
        result = getattr(inner, attr, None)
        info = info or getattr(result, "server_info", None) or getattr(
            result, "serverInfo", None)
    return info


def _shown(connection: dict[str, Any], name: str) -> str:
    if "label" in connection:
        return str(connection["label"])
    if name:
        return name
    if "url" in connection:
        return urlsplit(connection["url"]).hostname or "mcp-server"
    if "command" in connection:
        return pathlib.PurePath(str(connection["command"])).name or "mcp-server"
    return "mcp-server"


def identify(session: Any, server: Any) -> Identity:
    """The identity of the server ``session`` talks to, after its handshake."""
    info = _server_info(session)
    name = getattr(info, "name", None)
    name = name if isinstance(name, str) else ""
    version = getattr(info, "version", None)
    connection, owner, callers = _connection(session, server)
    whole = {"connection": connection, "name": name,
             "version": version if isinstance(version, str) else ""}
    # Masked credentials only, and then hashed: 16 bytes name the server in keys.
    key = _wire.digest_of(orjson.dumps(whole, option=orjson.OPT_SORT_KEYS))
    shown = _shown(connection, name)
    return Identity(f"mcp:{shown}#{key[:16]}", shown, owner, callers)
