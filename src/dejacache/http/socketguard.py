"""The replay backstop: inside a replay block, no connection escapes interception.

HTTP interception answers every request it sees from the recording, so in ``replay`` mode a
connection is only opened by a request that did *not* go through it: a transport dejacache
does not know (litellm's aiohttp transport, imported inside the block, once made paid
calls during replays and recorded nothing). Rather than trust the list of known transports,
replay blocks also watch the socket layer (``cassettes/netguard.py``) and refuse such a
connection with ``NetworkBlocked``, naming the host and the code path that tried.

Which connections are refused: those made in a replay context (``scope.current()`` in
``replay`` mode inside a test-facing block, or inside ``intercept()``; a bare worker thread
counts when the single open block replays, as for interception itself), that interception did
not hand on deliberately (an ignored host, caching off), that do not come from dejacache's own
stores (a Redis store), to a host not allowed by name (``intercept(ignore_hosts=...)``,
``DEJACACHE_IGNORE_HOSTS``, the pytest plugin's ``allow_hosts``), and

- to any host that is not loopback, or
- to loopback through an HTTP client (``http.client``, ``urllib3``, ``aiohttp``,
  ``httpcore``...): a local model server (Ollama, vLLM) answers HTTP on loopback, and so does
  the loopback provider of our tests. Other loopback connections (a database or queue the
  test runs, a raw socket) are the test's own business and stay allowed.

Recording blocks (``auto`` and ``record`` mode) cannot refuse such a connection without
failing a run that would have worked, but they would store nothing for it and say nothing
(as dspy's lm15 engine did before ``lm15.py``). A connection from an HTTP client that did
not come through interception, under the same rules otherwise, is let through with a
``DejacacheWarning`` naming the host and the code path.

Cost: nothing per request; per connection opened while a block is open, one context-variable
read, and a walk up the stack only for a connection the rules above already suspect.
Limits: connections opened below Python (uvloop's ``create_connection``, C extensions such
as pycurl or libpq) are not seen.
"""

from __future__ import annotations

import threading
import warnings

from ..cassettes.attempts import Attempt, code_path, stack_modules
from ..cassettes.netguard import add_check, allowed_hosts, remove_check
from ..config import Effective
from ..errors import DejacacheWarning, NetworkBlocked
from ..scope import current
from .routing import INTERCEPT_OPTIONS, env_ignored_hosts
from .transport import bypassing

__all__ = ["HTTP_CLIENTS", "acquire", "release"]

# Modules whose presence on the stack makes a loopback connection an HTTP request. anyio
# and aiohappyeyeballs open connections for httpcore and aiohttp in tasks of their own,
# whose stacks no longer show the client.
HTTP_CLIENTS = ("http.client", "urllib.request", "urllib3", "requests", "httpcore", "httpx",
                "httpx2", "h11", "aiohttp", "aiohappyeyeballs", "anyio", "httplib2",
                "niquests", "tornado", "websockets", "websocket", "litellm", "openai",
                "anthropic", "lm15", "dspy._vendor.lm15")

_LOCK = threading.Lock()
_COUNT = 0


def _matches(mod: str, names: tuple[str, ...]) -> bool:
    return any(mod == n or mod.startswith(n + ".") for n in names)


def _watched() -> tuple[Effective, frozenset[str]] | None:
    """The settings in force here, when they replay or record, and the hosts they let
    through; None where connections are none of our business."""
    if bypassing():  # interception handed this request on itself
        return None
    eff = current()
    if eff.mode == "off" or eff.namespace is None:
        return None
    opts = INTERCEPT_OPTIONS.get()
    if not eff.test_facing and opts is None:
        return None
    ignored = env_ignored_hosts()
    if opts is not None and opts.ignore_hosts:
        ignored = ignored | opts.ignore_hosts
    return eff, ignored


def _check(attempt: Attempt) -> None:
    if attempt.kind != "connect":
        return  # a lookup is no live call; the connection that follows is checked
    found = _watched()
    if found is None:
        return
    eff, ignored = found
    allowed = {h.lower() for h in ignored} | allowed_hosts()
    names = attempt.names
    if not names.isdisjoint(allowed) or (attempt.loopback and "localhost" in allowed):
        return
    frames = stack_modules(3)
    mods = [m for m, _, _ in frames]
    if any(m.startswith("dejacache.stores") for m in mods):
        return  # the store in force (Redis) is how a replay gets its answers
    http = any(_matches(m, HTTP_CLIENTS) for m in mods)
    if eff.mode != "replay":
        if http:
            _warn_unrecorded(eff, attempt, code_path(frames))
        return
    if attempt.loopback and not http:
        return
    path = code_path(frames)
    where = attempt.where
    source = f" from {eff.source}" if eff.source else ""
    amb = eff.ambiguous
    context = (f"a thread carrying no dejacache scope while {amb} blocks are open"
               if amb else "a replay block")
    raise NetworkBlocked(
        f"dejacache refused a connection to {where} from {context}{source}: it did not go "
        f"through dejacache's HTTP interception, so it would have been a live call "
        f"(code path: {path}). Send it through a client dejacache intercepts ({_CLIENTS}), or "
        "let this host through with "
        f"intercept(ignore_hosts=[{attempt.name!r}]) or DEJACACHE_IGNORE_HOSTS.",
        source=eff.source, host=where, code_path=path,
    )


_CLIENTS = ("httpx, httpx2, requests, urllib3, boto3/botocore, aiohttp >= 3.12, the SDKs' and "
            "litellm's aiohttp transports, dspy's lm15")


def _warn_unrecorded(eff: Effective, attempt: Attempt, path: str) -> None:
    source = f" in {eff.source}" if eff.source else ""
    # stacklevel 2 attributes it to the socket layer's check loop: the warnings registry
    # there shows each (host, code path) once under the default filter.
    warnings.warn(
        f"dejacache: an HTTP connection to {attempt.where}{source} ({eff.mode} mode) did not go "
        f"through dejacache's HTTP interception, so nothing is recorded for it and a replay "
        f"will refuse it (code path: {path}). Send it through a client dejacache intercepts "
        f"({_CLIENTS}), or let this host through with "
        f"intercept(ignore_hosts=[{attempt.name!r}]) or DEJACACHE_IGNORE_HOSTS.",
        DejacacheWarning, stacklevel=2,
    )


def acquire() -> None:
    """One more open block: watch connections (refcounted with :func:`release`)."""
    global _COUNT
    with _LOCK:
        _COUNT += 1
        if _COUNT == 1:
            add_check(_check)


def release() -> None:
    global _COUNT
    with _LOCK:
        if _COUNT <= 0:
            return
        _COUNT -= 1
        if _COUNT == 0:
            remove_check(_check)
