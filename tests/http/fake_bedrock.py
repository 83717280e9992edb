"""A loopback Amazon Bedrock runtime that boto3 reaches through ``endpoint_url``.

Speaks the ``rest-json`` protocol of ``bedrock-runtime`` as AWS puts it on the wire:

- ``POST /model/{modelId}/converse``: the Converse answer (``output.message``, ``stopReason``,
  ``usage`` with inputTokens/outputTokens/totalTokens, ``metrics``). Like AWS, it names no
  model and carries no response id: the model is the one in the path, the id is the
  ``x-amzn-RequestId`` header.
- ``POST /model/{modelId}/converse-stream``: ``application/vnd.amazon.eventstream``, one
  binary message per HTTP chunk (``messageStart``, ``contentBlockStart`` for a tool call,
  ``contentBlockDelta`` per word, ``contentBlockStop``, ``messageStop``, ``metadata`` with the
  usage). Every event's JSON carries AWS's ``p`` padding field, of a varying length.
- ``POST /model/{modelId}/invoke`` and ``.../invoke-with-response-stream``: the provider's own
  JSON in the body; here Anthropic-on-Bedrock (``anthropic_version`` in the request): a
  Messages answer, or ``chunk`` events whose ``bytes`` are the base64 of Anthropic's stream
  events, the last one with ``amazon-bedrock-invocationMetrics``. Any other body is refused
  with AWS's ``ValidationException`` (malformed input request).

Requests are logged with their headers (SigV4's ``authorization``, ``x-amz-date``,
``x-amz-security-token``): a test can check where the dummy credentials went; signatures are
not verified. Tool calling follows the same script as ``FakeProvider``: tools offered and no
tool result yet gets a tool call; a result gets a text quoting it.

``script`` overrides (besides ``ScriptedProvider``'s): ``{"status": 429}`` answers the error AWS
sends for that status (ThrottlingException for 429, InternalServerException for 500,
ServiceUnavailableException for 503, ValidationException for 400, ...): its ``message`` JSON and
the ``x-amzn-ErrorType`` header botocore reads the code from. ``{"cut": 2, "exception":
"throttlingException"}`` ends a stream after 2 events with that exception event (AWS's
mid-stream error; botocore raises ``EventStreamError``).
"""

from __future__ import annotations

import base64
import secrets
import string
import uuid
from typing import Any
from urllib.parse import unquote

import orjson

from provider_support import (
    ScriptedHandler,
    ScriptedProvider,
    anthropic_events,
    eventstream_message,
    reply_text,
    rid,
    tokens,
    words,
)

__all__ = ["ERRORS", "FakeBedrock", "frame_event", "frame_exception"]

EVENTSTREAM = "application/vnd.amazon.eventstream"

# status -> (error type, message) as Bedrock answers them.
ERRORS: dict[int, tuple[str, str]] = {
    400: ("ValidationException", "Malformed input request, please reformat your input and "
                                 "try again."),
    403: ("AccessDeniedException", "You don't have access to the model with the specified "
                                   "model ID."),
    404: ("ResourceNotFoundException", "Could not resolve the foundation model from the "
                                       "provided model identifier."),
    408: ("ModelTimeoutException", "Model has timed out in processing the request."),
    424: ("ModelErrorException", "The model returned an error."),
    429: ("ThrottlingException", "Too many requests, please wait before trying again."),
    500: ("InternalServerException", "The server encountered an internal error while "
                                     "processing the request."),
    503: ("ServiceUnavailableException", "Bedrock is unable to process your request."),
}

_PAD = string.ascii_letters + string.digits


def _padded(data: dict[str, Any]) -> bytes:
    # AWS pads every event with a "p" field of varying length so sizes do not leak content.
    return orjson.dumps({**data, "p": _PAD[: 1 + secrets.randbelow(len(_PAD))]})


def frame_event(kind: str, data: dict[str, Any]) -> bytes:
    """One event message of a Bedrock stream (``:message-type`` event)."""
    return eventstream_message({":event-type": kind, ":content-type": "application/json",
                                ":message-type": "event"}, _padded(data))


def frame_exception(kind: str, message: str) -> bytes:
    """One exception message (``:message-type`` exception), as a stream fails midway."""
    return eventstream_message({":exception-type": kind, ":content-type": "application/json",
                                ":message-type": "exception"},
                               orjson.dumps({"message": message}))


def _model_id(path: str) -> tuple[str, str]:
    """``/model/{modelId}/{action}`` -> (model id, action); the id arrives percent-encoded
    (``anthropic.claude-3-haiku-20240307-v1%3A0``, ARNs with ``%2F``)."""
    _, _, rest = path.split("?")[0].partition("/model/")
    model, _, action = rest.rpartition("/")
    return unquote(model), action


def _anthropic_model(model_id: str) -> str:
    """The name Anthropic-on-Bedrock answers with: no region, vendor or version suffix."""
    name = model_id.rsplit("/", 1)[-1].split("anthropic.", 1)[-1]
    return name.rsplit("-v", 1)[0]


class _Handler(ScriptedHandler):
    fake: FakeBedrock

    def do_POST(self) -> None:
        body = self.read_json()
        if not self.begin(body):
            return
        if "status" in self.ov:
            return self._error(int(self.ov["status"]))
        model, action = _model_id(self.path)
        if action == "converse":
            return self._converse(model, body, stream=False)
        if action == "converse-stream":
            return self._converse(model, body, stream=True)
        if action in ("invoke", "invoke-with-response-stream"):
            if "anthropic_version" not in body:
                return self._error(400, "Malformed input request: #: required key "
                                        "[anthropic_version] not found, please reformat your "
                                        "input and try again.")
            return self._invoke(model, body, stream=action != "invoke")
        self._error(404, f"Unknown operation {action}")

    # ------------------------------------------------------------ the wire

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"x-amzn-RequestId": str(uuid.uuid4()), **(extra or {}),
                **self.ov.get("headers", {})}

    def _error(self, status: int, message: str | None = None) -> None:
        kind, text = ERRORS.get(status, ("InternalServerException", "Internal error"))
        self.send_json(status, {"message": message or text}, self._headers({
            "x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}))

    def _stream(self, frames: list[bytes], extra: dict[str, str] | None = None) -> None:
        exception = self.ov.get("exception")
        if exception is not None:
            cut = int(self.ov.get("cut", 1))
            frames = [*frames[:cut], frame_exception(exception, "Stream failed midway.")]
            # The cut is spent on the exception: the stream itself ends normally after it.
            self.ov = {k: v for k, v in self.ov.items() if k != "cut"}
        self.write_stream(frames, EVENTSTREAM, self._headers(extra))

    # ------------------------------------------------------------ Converse

    def _converse(self, model: str, body: dict[str, Any], *, stream: bool) -> None:
        n = self.fake.next_n()
        msgs = body.get("messages") or []
        last = msgs[-1].get("content", []) if msgs else []
        result = next((b["toolResult"] for b in last if "toolResult" in b), None)
        tools = (body.get("toolConfig") or {}).get("tools") or []
        usage = {"inputTokens": tokens([body.get("system"), msgs])}
        block: dict[str, Any]
        if tools and result is None:
            block = {"toolUse": {"toolUseId": rid("tooluse_"), "name": tools[0]["toolSpec"]["name"],
                                 "input": {"city": "Paris"}}}
            stop = "tool_use"
        else:
            said = result["content"][0] if result else None
            block = {"text": reply_text(n, None if said is None else said.get("text", said))}
            stop = "end_turn"
        usage["outputTokens"] = tokens(block)
        usage["totalTokens"] = usage["inputTokens"] + usage["outputTokens"]
        metrics = {"latencyMs": 100 + n}
        if not stream:
            return self.send_json(200, {
                "output": {"message": {"role": "assistant", "content": [block]}},
                "stopReason": stop, "usage": usage, "metrics": metrics}, self._headers())
        frames = [frame_event("messageStart", {"role": "assistant"})]
        if "toolUse" in block:
            use = block["toolUse"]
            frames.append(frame_event("contentBlockStart", {"contentBlockIndex": 0, "start": {
                "toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}}))
            deltas = [{"toolUse": {"input": orjson.dumps(use["input"]).decode()}}]
        else:
            deltas = [{"text": piece} for piece in words(block["text"])]
        frames += [frame_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": d})
                   for d in deltas]
        frames.append(frame_event("contentBlockStop", {"contentBlockIndex": 0}))
        frames.append(frame_event("messageStop", {"stopReason": stop}))
        frames.append(frame_event("metadata", {"usage": usage, "metrics": metrics}))
        self._stream(frames)

    # ------------------------------------------------------------ InvokeModel (Anthropic)

    def _invoke(self, model_id: str, body: dict[str, Any], *, stream: bool) -> None:
        n = self.fake.next_n()
        msgs = body.get("messages") or []
        content = msgs[-1].get("content") if msgs else None
        result = None
        if isinstance(content, list):
            result = next((c for c in content if isinstance(c, dict)
                           and c.get("type") == "tool_result"), None)
        if body.get("tools") and result is None:
            block: dict[str, Any] = {"type": "tool_use", "id": rid("toolu_bdrk_"),
                                     "name": body["tools"][0]["name"], "input": {"city": "Paris"}}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": reply_text(n, result and result.get("content"))}
            stop = "end_turn"
        usage = {"input_tokens": tokens([body.get("system"), msgs]),
                 "output_tokens": tokens(block)}
        msg = {"id": "msg_bdrk_" + secrets.token_hex(12), "type": "message",
               "role": "assistant", "model": _anthropic_model(model_id), "content": [block],
               "stop_reason": stop, "stop_sequence": None, "usage": usage}
        counts = {"X-Amzn-Bedrock-Input-Token-Count": str(usage["input_tokens"]),
                  "X-Amzn-Bedrock-Output-Token-Count": str(usage["output_tokens"]),
                  "X-Amzn-Bedrock-Invocation-Latency": str(100 + n)}
        if not stream:
            return self.send_json(200, msg, self._headers(counts))
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": w} for w in words(block["text"])]
        else:
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta",
                       "partial_json": orjson.dumps(block["input"]).decode()}]
        events = anthropic_events(msg, {**usage, "output_tokens": 1}, start, deltas)
        events[-1]["amazon-bedrock-invocationMetrics"] = {
            "inputTokenCount": usage["input_tokens"],
            "outputTokenCount": usage["output_tokens"],
            "invocationLatency": 100 + n, "firstByteLatency": 50 + n}
        frames = [frame_event("chunk", {"bytes": base64.b64encode(orjson.dumps(e)).decode()})
                  for e in events]
        self._stream(frames, {"X-Amzn-Bedrock-Content-Type": "application/json"})


class FakeBedrock(ScriptedProvider):
    handler = _Handler
