"""The loopback fake provider, taught the two tool protocols that are not native tool calls.

``FakeProvider`` (tests/http) answers a request that offers tools with a call to the first
tool and one that carries a ``tool`` message with a text quoting it. Two frameworks need more:

* smolagents' ``ToolCallingAgent`` always offers ``final_answer`` and sends tool results back
  as user text (``Observation: ...``), so a run ends only when the model calls
  ``final_answer``: here it does, quoting the observation.
* dspy's ``ReAct`` does not use native tool calls at all: its ``ChatAdapter`` asks for
  ``[[ ## field ## ]]`` sections. The first step names the first tool listed in the
  instructions, the next one ``finish``, and the extract step answers quoting the
  observation.

Every answer still carries a fresh nonce and fresh ids, so a replay is told apart from a live
call by its text alone.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import orjson
from fake_provider import FakeProvider, _Handler

from provider_support import DropListener, chat_message, chat_stream, rid, tool_call

__all__ = ["DropListener", "FrameworkProvider"]


def _text(content: Any) -> str:
    """A message's text, whether a string or a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _section(text: str, name: str) -> str | None:
    m = re.search(r"\[\[ ## " + re.escape(name) + r" ## \]\]\n(.*?)(?=\n\n\[\[ ## |\Z)", text,
                  re.S)
    return m.group(1).strip() if m else None


class _FrameworkHandler(_Handler):
    def _chat(self, body: dict[str, Any], ov: dict[str, Any]) -> None:
        msgs = body.get("messages") or []
        system = _text(msgs[0].get("content")) if msgs else ""
        last_user = next((_text(m.get("content")) for m in reversed(msgs)
                          if m.get("role") == "user"), "")
        if "[[ ## next_tool_name ## ]]" in system:
            return self._dspy_step(system, last_user, ov)
        if "[[ ## answer ## ]]" in system and "[[ ## trajectory ## ]]" in last_user:
            obs = _section(last_user, "observation_0") or "nothing"
            n = self.fake.next_n()
            return self._reply(body, ov, text=(
                f"[[ ## reasoning ## ]]\nThe tool answered.\n\n[[ ## answer ## ]]\n"
                f"Tool said {obs} (reply {n}, {secrets.token_hex(3)})\n\n[[ ## completed ## ]]"))
        names = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        if "final_answer" in names:
            obs = next((_text(m.get("content")) for m in msgs
                        if m.get("role") == "tool" or ("Observation:" in _text(m.get("content"))
                        and m.get("role") != "system")), None)
            n = self.fake.next_n()
            if obs is not None:
                obs = obs.split("Observation:", 1)[-1].strip()
                answer = f"Tool said {obs} (reply {n}, {secrets.token_hex(3)})"
                return self._reply(body, ov, call=("final_answer", {"answer": answer}))
            first = next(x for x in names if x != "final_answer")
            return self._reply(body, ov, call=(first, {"city": "Paris"}))
        return super()._chat(body, ov)

    def _dspy_step(self, system: str, last_user: str, ov: dict[str, Any]) -> None:
        n = self.fake.next_n()
        m = re.search(r"\(1\) (\w+)", system)
        tool = m.group(1) if m else "finish"
        if "[[ ## observation_0 ## ]]" in last_user:
            thought, tool, args = "I have the answer.", "finish", {}
        else:
            thought, args = f"I should call {tool} ({n}).", {"city": "Paris"}
        self._reply({}, ov, text=(
            f"[[ ## next_thought ## ]]\n{thought}\n\n[[ ## next_tool_name ## ]]\n{tool}\n\n"
            f"[[ ## next_tool_args ## ]]\n{orjson.dumps(args).decode()}\n\n"
            "[[ ## completed ## ]]"))

    def _reply(self, body: dict[str, Any], ov: dict[str, Any], *, text: str | None = None,
               call: tuple[str, dict[str, Any]] | None = None) -> None:
        """A chat completion (or its stream) holding ``text`` or one call of ``call``."""
        cid = rid("chatcmpl-")
        model = body.get("model", "gpt-test")
        made = None if call is None else tool_call(*call)
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        if not body.get("stream"):
            return self._json(200, {
                "id": cid, "object": "chat.completion", "created": 1700000000, "model": model,
                "choices": [{"index": 0, "message": chat_message(text, made), "logprobs": None,
                             "finish_reason": "tool_calls" if made else "stop"}],
                "usage": usage})
        # Word by word with the whitespace that follows (dspy's sections span lines).
        pieces = re.findall(r"\S+\s*", text or "")
        self._sse(chat_stream(cid, 1700000000, model, pieces, made, usage), ov)


class FrameworkProvider(FakeProvider):
    handler = _FrameworkHandler
