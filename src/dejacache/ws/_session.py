"""One session's state as pure data: what the client is owed, and the window being recorded.

A session is recorded as calls (``_drive.py`` makes them): the **handshake**, whose answer
holds the server's messages that came before the client's first message, and **each client
message**, whose answer holds the server's messages that came after it and before the
client's next one (a *window*), each with its offset in seconds from the window's start
(pacing, as for SSE), and the close if the server closed then. Stored values::

    handshake: {"status": 101, "headers": [...], "subprotocol": "...", "session": 0,
                "messages": [[0.012, {"json": {...}}], ...], "close"?, "usage"?, "model"?}
               {"status": 401, "headers": [...], "json" | "text" | "bytes": ...}
               {"error": {"type": "ConnectionRefusedError", "message": "...", "errno": 111}}
    message:   {"messages": [[0.4, {...}], ...], "close"?: {"code", "reason", "at", "error"?},
                "usage"?, "model"?, "ids"?, "alias"?}

(``error``: true when the client's own library ended the session, refusing what the server
sent, ``_message.Faulted``; its code and its error's text are the close's.)

(``alias``: the tag the window's ids are keyed by, ``http/aliases.py``; a handshake with ids
carries one too.)

Replaying a window queues its messages for the client (due at their offsets when the block
replays at the recorded pace, at once otherwise); recording one collects what the live
server sends until the client's next message. No clock, lock or I/O here: the drivers pass
``now`` and do the waiting.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping
from typing import Any

from ..http.exchange import body_field, replay_headers, stored_headers
from ..http.providers import Provider
from ._message import (
    UPGRADE_HEADERS,
    Answer,
    Closed,
    Cut,
    Faulted,
    Message,
    json_of,
    message_of,
    stored,
)

__all__ = ["SessionState", "Window", "add_meta", "answer_of", "error_of", "handshake_value",
           "model_in_query"]

Item = Message | Closed


def handshake_value(answer: Answer, ordinal: int) -> dict[str, Any]:
    """The stored answer of a handshake (its window's messages are added when it closes)."""
    kept = [(k, v) for k, v in answer.headers if k.lower() not in UPGRADE_HEADERS]
    headers = stored_headers(kept)
    value: dict[str, Any] = {"status": answer.status, "headers": headers}
    if answer.status == 101:
        value["session"] = ordinal
        if answer.subprotocol:
            value["subprotocol"] = answer.subprotocol
        return value
    ctype = next((v for k, v in answer.headers if k.lower() == "content-type"), "")
    field, parsed = body_field(answer.body, ctype)
    value[field] = parsed
    return value


def answer_of(value: Mapping[str, Any]) -> Answer:
    """The handshake answer a stored value stands for (an ``error`` value: see
    :func:`error_of`)."""
    status = int(value.get("status", 101))
    headers = replay_headers(value.get("headers") or [])
    if "json" in value:
        import orjson

        body = orjson.dumps(value["json"]) if value["json"] is not None else b""
    elif "text" in value:
        body = str(value["text"]).encode()
    else:
        raw = value.get("bytes", b"")
        body = bytes(raw) if isinstance(raw, (bytes, bytearray)) else b""
    sub = value.get("subprotocol")
    return Answer(status, headers, sub if type(sub) is str else None, body)


def error_of(exc: BaseException) -> dict[str, Any]:
    """A connection failure as a handshake's stored answer."""
    err: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    errno = getattr(exc, "errno", None)
    if type(errno) is int:
        err["errno"] = errno
        err["message"] = getattr(exc, "strerror", None) or str(exc)
    return {"error": err}


class Window:
    """The server's messages after one client message (or after the handshake), as they
    come while recorded."""

    __slots__ = ("close", "cut", "items", "jsons", "start")

    def __init__(self, start: float) -> None:
        self.start = start
        self.items: list[list[Any]] = []
        self.jsons: list[Any] = []
        self.close: dict[str, Any] | None = None
        self.cut = False  # ended by a message over the size bound: not stored (``Cut``)

    def add(self, m: Message, now: float) -> None:
        kept = stored(m)
        self.items.append([round(now - self.start, 4), kept])
        if "json" in kept:
            self.jsons.append(kept["json"])

    def end(self, c: Closed, now: float) -> None:
        if isinstance(c, Cut):
            self.cut = True
        if self.close is None:
            self.close = {"code": c.code, "reason": c.reason, "at": round(now - self.start, 4)}
            if isinstance(c, Faulted):
                self.close["error"] = True

    def value(self, provider: Provider, model: str) -> dict[str, Any]:
        """The stored answer: the messages, the close, and what the provider reads in them
        (tokens, the model, ids the client may send back)."""
        out: dict[str, Any] = {"messages": self.items}
        if self.close is not None:
            out["close"] = self.close
        add_meta(out, provider, self.jsons, model)
        return out


def add_meta(value: dict[str, Any], provider: Provider, jsons: list[Any], model: str) -> None:
    if not jsons:
        return
    ids = provider.ids(None, jsons)
    if ids:
        value["ids"] = ids
    usage = provider.usage(None, jsons)
    if usage:
        value["usage"] = usage
        found = provider.model(None, jsons) or model
        if found:
            value["model"] = found


class SessionState:
    """What one session owes its client (``pending``) and the window being recorded."""

    __slots__ = ("ended", "history", "model", "name", "pending", "provider", "realtime",
                 "replayed", "window")

    def __init__(self, provider: Provider, name: str, realtime: bool, model: str = "") -> None:
        self.provider = provider
        self.name = name
        self.realtime = realtime
        self.model = model  # the model asked for (URL or setup message), for prices
        # (due time or None, item): what the client receives next, in order
        self.pending: collections.deque[tuple[float | None, Item]] = collections.deque()
        self.window: Window | None = None
        self.history: list[Message] = []  # what the client sent, for a late live start
        self.ended = False  # the end of the session is queued: nothing more comes
        self.replayed = 0  # server messages handed out from the recording so far

    # ------------------------------------------------------------ replay

    def play(self, value: Mapping[str, Any], now: float) -> list[str]:
        """Queue a recorded window's messages (and close); returns the ids it names."""
        items = value.get("messages")
        if items:  # (most windows of a voice session are empty: an audio chunk's)
            queued: list[tuple[float | None, Item]]
            if self.realtime:
                queued = [(now + float(offset), message_of(m)) for offset, m in items]
            else:  # due at once: no offsets read
                queued = [(None, message_of(m)) for _, m in items]
            self.replayed += len(queued)
            if not self.ended:  # (a message is never the end: none of them sets it)
                self.pending.extend(queued)
        if len(value) == 1 and items is not None:
            return []  # the messages alone: no close, model or ids to read
        close = value.get("close")
        if isinstance(close, dict):
            at = float(close.get("at", 0.0))
            end = Faulted if close.get("error") is True else Closed
            self._queue(now + at if self.realtime else None,
                        end(int(close.get("code", 1000)), str(close.get("reason", ""))))
        found = value.get("model")
        if type(found) is str and found:
            self.model = found
        ids = value.get("ids")
        return [i for i in ids if type(i) is str] if isinstance(ids, list) else []

    def _queue(self, due: float | None, item: Item) -> None:
        if self.ended:
            return
        self.pending.append((due, item))
        if isinstance(item, Closed):
            self.ended = True

    # ------------------------------------------------------------ record

    def open_window(self, now: float) -> None:
        self.window = Window(now)

    def heard(self, item: Item, now: float) -> None:
        """A live server message (or the end of the connection): the client gets it now,
        and the window being recorded keeps it."""
        w = self.window
        if isinstance(item, Closed):
            if w is not None:
                w.end(item, now)
        elif w is not None:
            w.add(item, now)
        self._queue(None, item)

    def take_window(self) -> Window | None:
        w, self.window = self.window, None
        return w

    # ------------------------------------------------------------ the client

    def sent(self, m: Message) -> Any:
        """The client sent ``m``: kept for a late live start; its JSON, for the key and the
        model it names (a Live ``setup`` message)."""
        self.history.append(m)
        tree = json_of(m)
        if not self.model and isinstance(tree, dict):
            self.model = _model_asked(tree)
        return tree

    def next_due(self) -> float | None:
        return self.pending[0][0] if self.pending else None


def _model_asked(tree: Mapping[str, Any]) -> str:
    for part in ("setup", "session"):
        inner = tree.get(part)
        model = inner.get("model") if isinstance(inner, dict) else None
        if isinstance(model, str):
            return model.rpartition("/")[2]
    return ""


def model_in_query(query: Iterable[tuple[str, str]]) -> str:
    return next((v for k, v in query if k == "model"), "")
