"""Anthropic Messages API."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..._core.cache_fields import FIELDS
from ._base import END, FINISHING, IN_PROGRESS, Provider, usage_ints

__all__ = ["PROVIDER", "Anthropic"]


class Anthropic(Provider):
    name = "anthropic"
    priority = 10
    # metadata holds only user_id, an end-user tag that does not change the answer.
    volatile = frozenset({"metadata"})
    # What is cached, for how long and where: never what the model reads (keyed without).
    cache_fields = FIELDS["anthropic"]
    # message id and tool_use.id (fed back as tool_result.tool_use_id).
    alias_keys = frozenset({"id"})
    upstream = "https://api.anthropic.com"

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        if host.endswith("anthropic.com"):
            return True
        # "/v1/messages" alone is too common a path; the SDK always sends this header.
        return "/messages" in path and "anthropic-version" in headers

    def stage(self, event: str) -> int:
        # An event names itself in its first line ("event: message_delta") or, behind proxies
        # that drop event lines, in the leading "type" of its data. message_delta carries the
        # stop reason: litellm stops reading there and never sees message_stop.
        head = event[:48]
        if "message_" not in head:
            return IN_PROGRESS
        if "message_stop" in head:
            return END
        return FINISHING if "message_delta" in head else IN_PROGRESS

    def endpoint(self, host: str, path: str) -> str:
        if path.endswith("/messages/count_tokens"):
            return "anthropic.messages.count_tokens"
        if path.endswith("/messages"):
            return "anthropic.messages"
        parts = [p for p in path.split("/") if p and p != "v1"]
        return "anthropic." + (parts[0] if parts else "other")

    def usage(self, body: Any, events: Iterable[Any]) -> dict[str, int] | None:
        # Streams report input tokens in message_start and output tokens in message_delta.
        out: dict[str, int] = {}
        if isinstance(body, dict) and isinstance(body.get("usage"), dict):
            out.update(usage_ints(body["usage"]))
        for ev in events:
            if not isinstance(ev, dict):
                continue
            if ev.get("type") == "message_start" and isinstance(ev.get("message"), dict):
                out.update(usage_ints(ev["message"].get("usage")))
            elif ev.get("type") == "message_delta":
                out.update(usage_ints(ev.get("usage")))
        return out or None


    def error_answer(self, status: int, kind: str, message: str
                     ) -> tuple[dict[str, str], Any]:
        return {}, {"type": "error", "error": {"type": kind, "message": message}}


PROVIDER = Anthropic()
