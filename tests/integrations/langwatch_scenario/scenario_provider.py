"""A loopback OpenAI chat-completions server that plays every part of a scenario run.

It tells the parts apart the way a real model would see them: the judge's decision call
offers ``continue_test``/``make_verdict``, its verdict call offers ``finish_test`` (answered
in the exact schema the tool declares: one entry per criterion key), the user simulator's
system prompt says it is pretending to be a user, and anything else is the agent under test.
Every answer carries a fresh nonce and fresh ids, so a replayed run is told apart from a
live one by its text alone.
"""

from __future__ import annotations

import itertools
import secrets
import time
from typing import Any

from provider_support import LoopbackHandler, LoopbackProvider, tool_call

__all__ = ["ScenarioProvider"]


class _Handler(LoopbackHandler):
    fake: ScenarioProvider

    def do_POST(self) -> None:
        body = self.read_json()
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        kind, message = self.fake.answer(body)
        with self.fake._lock:
            self.fake.requests.append({"kind": kind, "body": body})
        self.send_json(200, {
            "id": "chatcmpl-" + secrets.token_hex(8),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "m"),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28},
        })


class ScenarioProvider(LoopbackProvider):
    """``verdict_after``: agent replies the transcript must hold before the judge decides."""

    handler = _Handler

    def __init__(self, *, verdict_after: int = 2) -> None:
        super().__init__()
        self.verdict_after = verdict_after
        self.requests: list[dict[str, Any]] = []  # {"kind": ..., "body": ...}
        self._counter = itertools.count(1)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def kinds(self) -> list[str]:
        with self._lock:
            return [r["kind"] for r in self.requests]

    def answer(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        n = next(self._counter)
        nonce = secrets.token_hex(4)
        tools = {t.get("function", {}).get("name"): t for t in body.get("tools") or []}
        messages = body.get("messages") or []
        system = str(messages[0].get("content", "")) if messages else ""
        if "finish_test" in tools:
            schema = tools["finish_test"]["function"]["parameters"]
            keys = list(schema["properties"]["criteria"]["properties"])
            args = {
                "criteria": {k: {"requirement": f"the agent does {k}",
                                 "reasoning": f"seen in the transcript ({nonce})",
                                 "status": "passed"} for k in keys},
                "reasoning": f"every criterion passed (verdict {n}, {nonce})",
            }
            return "judge-verdict", _tool_call("finish_test", args)
        if "continue_test" in tools:
            transcript = str(messages[-1].get("content", "")) if messages else ""
            replies = transcript.count("\nassistant:") + transcript.startswith("assistant:")
            name = "make_verdict" if replies >= self.verdict_after else "continue_test"
            return "judge-decision", _tool_call(name, {})
        if "pretending to be a user" in system:
            return "user", {"role": "assistant", "content": f"user turn {n} ({nonce})"}
        return "agent", {"role": "assistant", "content": f"agent answer {n} ({nonce})"}


def _tool_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [tool_call(name, args)]}
