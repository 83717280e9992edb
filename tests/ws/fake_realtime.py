"""A loopback OpenAI Realtime server (``/v1/realtime?model=...``), close enough to the GA
protocol for the openai SDK's ``client.realtime.connect()`` and a voice agent on it.

It speaks the server events the SDK parses (``session.created``/``updated``,
``input_audio_buffer.speech_started``/``committed``, ``conversation.item.added``/``done``,
``conversation.item.retrieved``, ``response.created`` ... ``response.output_audio.delta``
... ``response.done`` with usage, ``rate_limits.updated``, ``error``) one event per write,
with fresh random ids on every connection (so a re-recording changes every id, as the real
API does). Audio answers are 24 kHz PCM16 in 100 ms deltas; a function tool is called when
the user asks about the weather, and its output is read back in the next answer. The
answers' audio is noise, fresh on every response (speech does not repeat chunk for chunk).
"""

from __future__ import annotations

import base64
import json
import secrets
import urllib.parse
from typing import Any

from ws_support import LoopbackServer

RATE = 24000
CHUNK = RATE * 2 // 10  # 100 ms of PCM16


def _id(prefix: str) -> str:
    return prefix + secrets.token_hex(8)


class _Session:
    def __init__(self, ws: Any, model: str) -> None:
        self.ws = ws
        self.model = model
        self.config: dict[str, Any] = {
            "type": "realtime", "object": "realtime.session", "id": _id("sess_"),
            "model": model, "output_modalities": ["audio"], "instructions": "",
            "tools": [], "tool_choice": "auto", "max_output_tokens": "inf",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE},
                                "turn_detection": None},
                      "output": {"format": {"type": "audio/pcm", "rate": RATE},
                                 "voice": "alloy", "speed": 1.0}},
        }
        self.buffer = bytearray()
        self.speaking = False
        self.last_item: str | None = None
        self.pending_input: list[str] = []  # what the next response answers
        self.tool_output: str | None = None
        self.items: dict[str, dict[str, Any]] = {}  # by id, for conversation.item.retrieve

    async def emit(self, kind: str, **fields: Any) -> None:
        await self.ws.send(json.dumps({"type": kind, "event_id": _id("event_"), **fields}))

    async def run(self) -> None:
        await self.emit("session.created", session=self.config)
        async for raw in self.ws:
            event = json.loads(raw)
            handler = getattr(self, "on_" + str(event.get("type", "")).replace(".", "_"), None)
            if handler is None:
                await self.emit("error", error={
                    "type": "invalid_request_error", "code": "unknown_event",
                    "message": f"Invalid value: '{event.get('type')}'",
                    "event_id": event.get("event_id")})
                continue
            await handler(event)

    # ------------------------------------------------------------ client events

    async def on_session_update(self, event: dict[str, Any]) -> None:
        for k, v in (event.get("session") or {}).items():
            if k != "type":
                self.config[k] = v
        await self.emit("session.updated", session=self.config)

    async def on_input_audio_buffer_append(self, event: dict[str, Any]) -> None:
        self.buffer += base64.b64decode(event["audio"])
        if not self.speaking and len(self.buffer) >= CHUNK * 3:
            self.speaking = True
            await self.emit("input_audio_buffer.speech_started",
                            audio_start_ms=100, item_id=_id("item_"))

    async def on_input_audio_buffer_commit(self, event: dict[str, Any]) -> None:
        item = _id("item_")
        seconds = len(self.buffer) / (RATE * 2)
        self.buffer.clear()
        self.speaking = False
        await self.emit("input_audio_buffer.committed", item_id=item,
                        previous_item_id=self.last_item)
        await self._added({"id": item, "type": "message", "role": "user",
                           "status": "completed", "object": "realtime.item",
                           "content": [{"type": "input_audio", "transcript": None}]})
        self.pending_input.append(f"{seconds:.1f} seconds of audio")

    async def on_input_audio_buffer_clear(self, event: dict[str, Any]) -> None:
        self.buffer.clear()
        await self.emit("input_audio_buffer.cleared")

    async def on_conversation_item_create(self, event: dict[str, Any]) -> None:
        item = dict(event.get("item") or {})
        item.setdefault("id", _id("item_"))
        item.setdefault("object", "realtime.item")
        item.setdefault("status", "completed")
        if item.get("type") == "function_call_output":
            self.tool_output = str(item.get("output"))
        else:
            texts = [c.get("text", "") for c in item.get("content") or ()
                     if c.get("type") == "input_text"]
            self.pending_input.append(" ".join(texts))
        await self._added(item)

    async def on_conversation_item_retrieve(self, event: dict[str, Any]) -> None:
        item = self.items.get(event.get("item_id", ""))
        if item is None:
            await self.emit("error", error={
                "type": "invalid_request_error", "code": "item_not_found",
                "message": f"no item {event.get('item_id')}", "event_id": None})
            return
        await self.emit("conversation.item.retrieved", item=item)

    async def on_conversation_item_truncate(self, event: dict[str, Any]) -> None:
        await self.emit("conversation.item.truncated", item_id=event["item_id"],
                        content_index=event.get("content_index", 0),
                        audio_end_ms=event.get("audio_end_ms", 0))

    async def on_response_cancel(self, event: dict[str, Any]) -> None:
        await self.emit("error", error={"type": "invalid_request_error",
                                        "code": "response_cancel_not_active",
                                        "message": "no active response", "event_id": None})

    async def on_response_create(self, event: dict[str, Any]) -> None:
        said = " / ".join(self.pending_input) or "nothing"
        self.pending_input.clear()
        if self.config.get("tools") and "weather" in said and self.tool_output is None:
            await self._function_call(self.config["tools"][0]["name"])
            return
        if self.tool_output is not None:
            said, self.tool_output = f"the tool said {self.tool_output}", None
        text = f"{self.config.get('instructions') or 'Hello'}: you sent {said}."
        await self._answer(text, seconds=2.0)

    # ------------------------------------------------------------ server turns

    async def _added(self, item: dict[str, Any]) -> None:
        await self.emit("conversation.item.added", previous_item_id=self.last_item, item=item)
        await self.emit("conversation.item.done", previous_item_id=self.last_item, item=item)
        self.last_item = item["id"]
        self.items[item["id"]] = item

    def _response(self, rid: str, status: str, output: list[Any]) -> dict[str, Any]:
        return {"id": rid, "object": "realtime.response", "status": status,
                "status_details": None, "output": output, "conversation_id": "conv_fake",
                "output_modalities": ["audio"], "max_output_tokens": "inf",
                "audio": {"output": {"format": {"type": "audio/pcm", "rate": RATE},
                                     "voice": "alloy"}},
                "usage": None, "metadata": None}

    async def _answer(self, text: str, seconds: float) -> None:
        rid, item = _id("resp_"), _id("item_")
        await self.emit("response.created", response=self._response(rid, "in_progress", []))
        msg = {"id": item, "object": "realtime.item", "type": "message", "role": "assistant",
               "status": "in_progress", "content": []}
        await self.emit("response.output_item.added", response_id=rid, output_index=0,
                        item=msg)
        part = {"type": "output_audio", "transcript": ""}
        loc = {"response_id": rid, "item_id": item, "output_index": 0, "content_index": 0}
        await self.emit("response.content_part.added", part=part, **loc)
        audio = secrets.token_bytes(int(seconds * RATE) * 2)  # speech does not repeat
        words = text.split()
        for i in range(0, len(audio), CHUNK):
            n = i // CHUNK
            if n < len(words):
                await self.emit("response.output_audio_transcript.delta",
                                delta=words[n] + " ", **loc)
            await self.emit("response.output_audio.delta",
                            delta=base64.b64encode(audio[i:i + CHUNK]).decode(), **loc)
        await self.emit("response.output_audio.done", **loc)
        await self.emit("response.output_audio_transcript.done", transcript=text, **loc)
        done_part = {"type": "output_audio", "transcript": text}
        await self.emit("response.content_part.done", part=done_part, **loc)
        msg = {**msg, "status": "completed", "content": [done_part]}
        await self.emit("response.output_item.done", response_id=rid, output_index=0,
                        item=msg)
        await self._done(rid, [msg], audio_out=int(seconds * 10), text_out=len(words))
        self.last_item = item

    async def _function_call(self, name: str) -> None:
        rid, item, call = _id("resp_"), _id("item_"), _id("call_")
        await self.emit("response.created", response=self._response(rid, "in_progress", []))
        fc = {"id": item, "object": "realtime.item", "type": "function_call",
              "status": "in_progress", "name": name, "call_id": call, "arguments": ""}
        await self.emit("response.output_item.added", response_id=rid, output_index=0,
                        item=fc)
        args = json.dumps({"city": "Paris"})
        await self.emit("response.function_call_arguments.delta", response_id=rid,
                        item_id=item, output_index=0, call_id=call, delta=args)
        await self.emit("response.function_call_arguments.done", response_id=rid,
                        item_id=item, output_index=0, call_id=call, name=name,
                        arguments=args)
        fc = {**fc, "status": "completed", "arguments": args}
        await self.emit("response.output_item.done", response_id=rid, output_index=0,
                        item=fc)
        await self._done(rid, [fc], audio_out=0, text_out=12)
        self.last_item = item

    async def _done(self, rid: str, output: list[Any], *, audio_out: int,
                    text_out: int) -> None:
        usage = {"total_tokens": 180 + audio_out + text_out, "input_tokens": 180,
                 "output_tokens": audio_out + text_out,
                 "input_token_details": {"text_tokens": 30, "audio_tokens": 150,
                                         "cached_tokens": 0,
                                         "cached_tokens_details": {"text_tokens": 0,
                                                                   "audio_tokens": 0}},
                 "output_token_details": {"text_tokens": text_out, "audio_tokens": audio_out}}
        resp = {**self._response(rid, "completed", output), "usage": usage}
        await self.emit("response.done", response=resp)
        await self.emit("rate_limits.updated", rate_limits=[
            {"name": "tokens", "limit": 40000, "remaining": 39000,
             "reset_seconds": round(secrets.randbelow(1000) / 100, 2)}])


async def _handle(ws: Any) -> None:
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(ws.request.path).query))
    auth = ws.request.headers.get("Authorization", "")
    if not auth.startswith("Bearer "):
        await ws.close(4001, "missing bearer token")
        return
    await _Session(ws, query.get("model", "gpt-realtime")).run()


class FakeRealtime(LoopbackServer):
    """The fake, started on a free loopback port; ``base_url`` for ``OpenAI(base_url=...)``."""

    def __init__(self) -> None:
        super().__init__(_handle)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"
