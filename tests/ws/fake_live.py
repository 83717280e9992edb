"""A loopback Gemini Live server (``BidiGenerateContent`` over TLS), close enough to the Live
API for google-genai's ``client.aio.live.connect()`` and a voice agent on it.

The client's first message is ``setup`` (answered with ``setupComplete``); then
``realtime_input`` audio chunks (16 kHz PCM16), ``client_content`` turns and
``tool_response`` messages, in the SDK's snake_case or the API's camelCase. A turn ends at
``audioStreamEnd``, ``activityEnd`` or ``turnComplete``, and is answered as the service
does: ``inputTranscription``, ``outputTranscription`` chunks, ``modelTurn`` audio parts
(24 kHz PCM16, 100 ms each), ``generationComplete``, then ``turnComplete`` with
``usageMetadata`` (audio and text tokens apart). Messages go out as JSON in binary frames,
one per write. A setup with a function tool gets a ``toolCall`` when the user asks about the
weather. The API key must come as ``x-goog-api-key`` or ``?key=``.
"""

from __future__ import annotations

import base64
import json
import secrets
import urllib.parse
from typing import Any

from ws_support import LoopbackServer, pcm

IN_RATE, OUT_RATE = 16000, 24000
CHUNK = OUT_RATE * 2 // 10


def _get(d: dict[str, Any], *names: str) -> Any:
    for n in names:
        if n in d:
            return d[n]
    return None


class _Session:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.setup: dict[str, Any] = {}
        self.audio = 0  # bytes of input audio this turn
        self.texts: list[str] = []
        self.tool: str | None = None
        self.called = False

    async def emit(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(message, separators=(",", ":")).encode())

    async def run(self) -> None:
        first = json.loads(await self.ws.recv())
        self.setup = first.get("setup") or {}
        if not str(self.setup.get("model", "")).startswith("models/"):
            await self.ws.close(1007, "setup.model must be models/...")
            return
        await self.emit({"setupComplete": {}})
        async for raw in self.ws:
            msg = json.loads(raw)
            realtime = _get(msg, "realtime_input", "realtimeInput")
            content = _get(msg, "client_content", "clientContent")
            tool = _get(msg, "tool_response", "toolResponse")
            if realtime is not None:
                await self._realtime(realtime)
            elif content is not None:
                for turn in content.get("turns") or ():
                    self.texts += [p.get("text", "") for p in turn.get("parts") or ()]
                if _get(content, "turnComplete", "turn_complete"):
                    await self._turn()
            elif tool is not None:
                out = _get(tool, "functionResponses", "function_responses") or []
                self.tool = json.dumps(out[0].get("response") if out else None)
                await self._turn()

    async def _realtime(self, realtime: dict[str, Any]) -> None:
        audio = realtime.get("audio")
        if isinstance(audio, dict):
            data = str(audio.get("data", ""))  # google-genai sends URL-safe base64
            self.audio += len(base64.b64decode(data + "=" * (-len(data) % 4), altchars=b"-_"))
        text = realtime.get("text")
        if isinstance(text, str):
            self.texts.append(text)
        if _get(realtime, "audioStreamEnd", "audio_stream_end", "activityEnd",
                "activity_end") is not None or isinstance(text, str):
            await self._turn()

    async def _turn(self) -> None:
        heard = f"{self.audio / (IN_RATE * 2):.1f} seconds of audio" if self.audio else ""
        said = " ".join([heard, *self.texts]).strip() or "nothing"
        self.audio, self.texts = 0, []
        if heard:
            await self.emit({"serverContent": {"inputTranscription": {"text": heard}}})
        decls = [d for t in self.setup.get("tools") or ()
                 for d in _get(t, "functionDeclarations", "function_declarations") or ()]
        if decls and "weather" in said and not self.called:
            self.called = True
            await self.emit({"toolCall": {"functionCalls": [{
                "id": "function-call-" + secrets.token_hex(6), "name": decls[0]["name"],
                "args": {"city": "Paris"}}]}})
            return
        if self.tool is not None:
            said, self.tool = f"the tool said {self.tool}", None
        await self._answer(f"Gemini heard {said}.", seconds=2.0)

    async def _answer(self, text: str, seconds: float) -> None:
        audio = pcm(seconds, OUT_RATE, seed=secrets.randbelow(8))
        words = text.split()
        for i in range(0, len(audio), CHUNK):
            n = i // CHUNK
            if n < len(words):
                await self.emit({"serverContent": {"outputTranscription": {
                    "text": words[n] + " "}}})
            await self.emit({"serverContent": {"modelTurn": {"parts": [{"inlineData": {
                "mimeType": f"audio/pcm;rate={OUT_RATE}",
                "data": base64.b64encode(audio[i:i + CHUNK]).decode()}}]}}})
        await self.emit({"serverContent": {"generationComplete": True}})
        audio_out = int(seconds * 25)
        await self.emit({"serverContent": {"turnComplete": True}, "usageMetadata": {
            "promptTokenCount": 120, "responseTokenCount": audio_out + len(words),
            "totalTokenCount": 120 + audio_out + len(words),
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 20},
                                    {"modality": "AUDIO", "tokenCount": 100}],
            "responseTokensDetails": [{"modality": "AUDIO", "tokenCount": audio_out},
                                      {"modality": "TEXT", "tokenCount": len(words)}]}})


async def _handle(ws: Any) -> None:
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(ws.request.path).query))
    if "BidiGenerateContent" not in ws.request.path:
        await ws.close(1008, "not found")
        return
    if not (ws.request.headers.get("x-goog-api-key") or query.get("key")):
        await ws.close(1008, "API key not valid")
        return
    await _Session(ws).run()


class FakeLive(LoopbackServer):
    """The fake over TLS (``tls_pair``); ``base_url`` for google-genai's http_options."""

    def __init__(self, ssl_context: Any) -> None:
        super().__init__(_handle, ssl_context=ssl_context)

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"
