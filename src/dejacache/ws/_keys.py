"""A WebSocket session's keys: the handshake keyed as an HTTP request, each client message
keyed within its session.

The handshake is a ``GET`` of the URL with its headers, so it is keyed by the same code as
every HTTP request (``http/keying.py``): path and query without authenticating parameters
(``?key=``), the headers that change the answer (``Sec-WebSocket-Protocol`` among them; the
upgrade's nonce and framing are transport), and who is asking as keyed digests
(``Authorization``, ``x-goog-api-key``), mapped one to one onto the recording's so a CI
replay with other credentials still finds it. The provider module names it
(``openai.realtime``, ``gemini.live``; ``ws.<host>`` for any other server).

A client message is keyed as ``{"ws_session": "<handshake key>#<n>", "body": <its JSON>}``
(or ``"text"`` / ``"bytes"`` for other messages), ``n`` the session's place among the
block's sessions with that handshake, so two concurrent sessions each find their own. The
body loses the provider's volatile fields (``event_id``) and the block's, and ids the server
named earlier in the block are aliased by the call whose answer held them, as in HTTP bodies
(``http/aliases.py``; ``_drive.py`` tags each window). JSON keys alike however it is spaced;
an object repeating a key keys as its pairs in order (``_message.json_of``).
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any, NamedTuple

from ..config import Effective
from ..http.aliases import AliasTable, table_for
from ..http.exchange import volatile_for
from ..http.keying import Keyed, keyed
from ..http.providers import Provider, detect
from ..keys import canonical_json, digest
from ._message import Handshake, Message, canonical_message

__all__ = ["MessageKey", "Route", "message_key", "route"]


class Route:
    """Where a handshake goes and how it is keyed."""

    __slots__ = ("aliases", "extra", "host", "keyed", "name", "path", "provider", "query",
                 "volatile")

    def __init__(self, provider: Provider, name: str, host: str, path: str,
                 query: list[tuple[str, str]], keyed: Keyed, aliases: AliasTable | None,
                 extra: tuple[str | re.Pattern[str], ...]) -> None:
        self.provider, self.name, self.host, self.path = provider, name, host, path
        self.query, self.keyed, self.aliases, self.extra = query, keyed, aliases, extra
        # What a message's key leaves out, read once a session, not once a message.
        self.volatile = volatile_for(provider.name, extra, provider.volatile)


def _headers(hs: Handshake) -> list[tuple[str, str]]:
    headers = [(k, v) for k, v in hs.headers]
    if hs.subprotocols and not any(k.lower() == "sec-websocket-protocol" for k, _ in headers):
        headers.append(("sec-websocket-protocol", ", ".join(hs.subprotocols)))
    return headers


def route(eff: Effective, hs: Handshake, volatile: tuple[str | re.Pattern[str], ...] = ()
          ) -> Route:
    """The handshake's provider, call name and key."""
    url = urllib.parse.urlsplit(hs.url)
    host = (url.hostname or "").lower()
    path = url.path or "/"
    query = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
    headers = _headers(hs)
    provider = detect(host, path, dict((k.lower(), v) for k, v in headers))
    name = provider.endpoint(host, path)
    if provider.name == "http":
        name = "ws." + host
    aliases = table_for(eff)
    extra = (*eff.volatile, *volatile) if volatile else eff.volatile
    args = ("GET", path, query, b"", "", provider, aliases, extra, eff.key_substitute)
    return Route(provider, name, host, path, query, keyed(eff, name, args, headers), aliases,
                 extra)


class MessageKey(NamedTuple):
    key: str
    canonical: bytes


def message_key(eff: Effective, r: Route, session: str, m: Message, tree: Any) -> MessageKey:
    """The key of a client message ``m`` (``tree``: its JSON, parsed) in ``session``."""
    if tree is not None and r.aliases is not None and len(r.aliases):
        # From the raw bytes first: a message naming none of the ids' heads (an audio
        # chunk) is not walked (walking a 6 KB chunk's text for ids was ~60 µs).
        raw = m.data.encode() if isinstance(m.data, str) else m.data
        tree = r.aliases.apply_json(raw, tree)
    form = canonical_message(m, tree)
    data: dict[str, Any] = {"ws_session": session}
    if "json" in form:
        data["body"] = form["json"]
        if form.get("binary"):
            data["binary"] = True
    else:
        data.update(form)
    vol, paths, patterns, _, tele = r.volatile
    canonical = canonical_json(data, volatile=vol, volatile_paths=paths,
                               volatile_patterns=patterns, function=r.provider.name,
                               substitutions=eff.key_substitute, telemetry=tele)
    # (tuple.__new__: the NamedTuple's own __new__ is a Python call)
    return _new(MessageKey, (digest(eff.namespace or "", r.name, canonical), canonical))


_new = tuple.__new__
