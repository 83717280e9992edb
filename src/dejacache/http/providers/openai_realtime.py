"""OpenAI's Realtime API over a WebSocket (``client.realtime.connect(...)``, ``wss://
api.openai.com/v1/realtime?model=...``): the session's name, the ids its events carry and
the client sends back, and the tokens its ``response.done`` events report.

The handshake is keyed like any request to ``/v1/realtime`` (``ws/``); each event the client
sends is keyed within its session, without ``event_id`` (a client may give any, and the
server echoes its own on every event). Item, response and call ids the server names are fed
back (``conversation.item.truncate``, ``function_call_output``, ``response.cancel``): they
are aliased by the call whose answer held them (``<id:T.n>``), as HTTP ids are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._base import Provider, int_fields

__all__ = ["PROVIDER", "OpenAIRealtime"]


class OpenAIRealtime(Provider):
    name = "openai"  # the same credentials and price table as the rest of OpenAI
    priority = 15  # before ``openai``, whose path rules would name it openai.realtime too
    volatile = frozenset({"event_id"})
    alias_keys = frozenset({"id", "item_id", "call_id", "response_id", "previous_item_id"})

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        return path.rstrip("/").endswith("/realtime")

    def endpoint(self, host: str, path: str) -> str:
        return "openai.realtime"

    def usage(self, body: Any, events: Iterable[Any]) -> dict[str, int] | None:
        """The usage of every ``response.done`` among ``events``, summed, with the audio
        and text parts apart (they are priced apart)."""
        total: dict[str, int] = {}
        for ev in events:
            if not (isinstance(ev, dict) and ev.get("type") == "response.done"):
                continue
            resp = ev.get("response")
            usage = resp.get("usage") if isinstance(resp, dict) else None
            if not isinstance(usage, dict):
                continue
            flat = int_fields(usage)
            got_in = int_fields(usage.get("input_token_details"))
            got_out = int_fields(usage.get("output_token_details"))
            for k, v in (("input_text_tokens", got_in.get("text_tokens")),
                         ("input_audio_tokens", got_in.get("audio_tokens")),
                         ("cached_tokens", got_in.get("cached_tokens")),
                         ("output_text_tokens", got_out.get("text_tokens")),
                         ("output_audio_tokens", got_out.get("audio_tokens"))):
                if v is not None:
                    flat[k] = v
            for k, v in flat.items():
                total[k] = total.get(k, 0) + v
        return total or None

    def model(self, body: Any, events: Iterable[Any]) -> str | None:
        found = None
        for ev in events:
            session = ev.get("session") if isinstance(ev, dict) else None
            if isinstance(session, dict) and type(session.get("model")) is str:
                found = session["model"]
        return found


PROVIDER = OpenAIRealtime()
