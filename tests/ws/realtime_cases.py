"""Voice agents on the real SDKs, once recording and once replaying (in their own process).

``python realtime_cases.py CASE MODE CASSETTE URL [CA_FILE]`` runs one agent inside
``dejacache.cassette(CASSETTE, mode=MODE)`` and prints what the app received, as JSON:

* ``openai``: ``AsyncOpenAI.realtime.connect()``: session.update with a function tool, a
  spoken turn (audio appended in 100 ms chunks, committed, answered), then a typed question
  that makes the model call the tool, the tool's output sent back and answered;
* ``openai-sync``: the same first turn on ``OpenAI.realtime.connect()`` (websockets' threads);
* ``gemini``: google-genai's ``client.aio.live.connect()``: a spoken turn
  (``send_realtime_input`` audio, ``audio_stream_end``), then a typed question answered with
  a tool call and the tool's response;
* ``gemini-key``: a raw ``websockets`` client to the Live endpoint with ``?key=``;
* ``pair``: two OpenAI sessions at once in one block (``asyncio.gather``), each its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
from typing import Any

import orjson
from ws_support import pcm

import dejacache

OPENAI_KEY = "sk-proj-realtimeTESTkey0123456789abcdefghijkl"
GEMINI_KEY = "AIzaSyD-liveTESTkey0123456789abcdefghijk"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _until_done(conn: Any, out: list[Any]) -> Any:
    async for event in conn:
        out.append(event.model_dump())
        if event.type == "response.done":
            return event
    return None


async def openai_agent(base_url: str, instructions: str = "Be brief") -> list[Any]:
    import openai

    out: list[Any] = []
    client = openai.AsyncOpenAI(base_url=base_url, api_key=OPENAI_KEY, max_retries=0)
    async with client.realtime.connect(model="gpt-realtime") as conn:
        await conn.session.update(session={"type": "realtime", "instructions": instructions,
                                           "tools": [WEATHER]})
        audio = pcm(1.5, 24000, seed=1)
        for i in range(0, len(audio), 4800):
            await conn.input_audio_buffer.append(audio=_b64(audio[i:i + 4800]))
        await conn.input_audio_buffer.commit()
        await conn.response.create()
        await _until_done(conn, out)
        await conn.conversation.item.create(item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "what is the weather in Paris?"}]})
        await conn.response.create()
        done = await _until_done(conn, out)
        call = done.response.output[0]
        await conn.conversation.item.create(item={
            "type": "function_call_output", "call_id": call.call_id,
            "output": json.dumps({"temperature": 21})})
        await conn.response.create()
        await _until_done(conn, out)
    await client.close()
    return out


def openai_sync_agent(base_url: str) -> list[Any]:
    import openai

    out: list[Any] = []
    client = openai.OpenAI(base_url=base_url, api_key=OPENAI_KEY, max_retries=0)
    with client.realtime.connect(model="gpt-realtime") as conn:
        audio = pcm(0.5, 24000, seed=2)
        for i in range(0, len(audio), 4800):
            conn.input_audio_buffer.append(audio=_b64(audio[i:i + 4800]))
        conn.input_audio_buffer.commit()
        conn.response.create()
        for event in conn:
            out.append(event.model_dump())
            if event.type == "response.done":
                break
    client.close()
    return out


async def gemini_agent(base_url: str, ca_file: str) -> list[Any]:
    from google import genai
    from google.genai import types

    ctx = ssl.create_default_context(cafile=ca_file)
    client = genai.Client(api_key=GEMINI_KEY, http_options={
        "base_url": base_url, "async_client_args": {"ssl": ctx}})
    config = {"response_modalities": ["AUDIO"], "output_audio_transcription": {},
              "tools": [{"function_declarations": [{
                  "name": "get_weather", "description": "Weather in a city",
                  "parameters": {"type": "OBJECT",
                                 "properties": {"city": {"type": "STRING"}}}}]}]}
    out: list[Any] = []
    async with client.aio.live.connect(model="gemini-live-2.5-flash-preview",
                                       config=config) as session:
        audio = pcm(1.0, 16000, seed=3)
        for i in range(0, len(audio), 3200):
            await session.send_realtime_input(audio=types.Blob(
                data=audio[i:i + 3200], mime_type="audio/pcm;rate=16000"))
        await session.send_realtime_input(audio_stream_end=True)
        out += [m.model_dump(mode="json") async for m in session.receive()]
        await session.send_client_content(
            turns={"role": "user", "parts": [{"text": "what is the weather in Paris?"}]},
            turn_complete=True)
        calls = []
        async for m in session.receive():
            out.append(m.model_dump(mode="json"))
            if m.tool_call is not None:
                calls += m.tool_call.function_calls or []
                break
        await session.send_tool_response(function_responses=[types.FunctionResponse(
            id=c.id, name=c.name, response={"temperature": 21}) for c in calls])
        out += [m.model_dump(mode="json") async for m in session.receive()]
    return out


async def gemini_key_agent(url: str, ca_file: str) -> list[Any]:
    from websockets.asyncio.client import connect

    ctx = ssl.create_default_context(cafile=ca_file)
    path = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    out: list[Any] = []
    async with connect(f"{url}{path}?key={GEMINI_KEY}", ssl=ctx) as ws:
        await ws.send(json.dumps({"setup": {"model": "models/gemini-2.0-flash-live-001"}}))
        out.append(json.loads(await ws.recv()))
        await ws.send(json.dumps({"realtimeInput": {"text": "hello"}}))
        while True:
            msg = json.loads(await ws.recv())
            out.append(msg)
            if msg.get("serverContent", {}).get("turnComplete"):
                break
    return out


async def pair(base_url: str) -> list[Any]:
    a, b = await asyncio.gather(openai_agent(base_url, "Answer as Alice"),
                                openai_agent(base_url, "Answer as Bob"))
    return [a, b]


def main(argv: list[str]) -> None:
    case, mode, path, url, *rest = argv
    with dejacache.cassette(path, mode=mode) as tape:  # type: ignore[arg-type]
        if case == "openai":
            got: Any = asyncio.run(openai_agent(url))
        elif case == "openai-sync":
            got = openai_sync_agent(url)
        elif case == "gemini":
            got = asyncio.run(gemini_agent(url, rest[0]))
        elif case == "gemini-key":
            got = asyncio.run(gemini_key_agent(url, rest[0]))
        elif case == "pair":
            got = asyncio.run(pair(url))
        else:
            raise SystemExit(f"unknown case {case}")
    counters = tape.counters
    sys.stdout.write(orjson.dumps({"events": got, "replayed": counters.replayed,
                                   "recorded": counters.recorded,
                                   "dollars": round(counters.dollars_saved, 6),
                                   "tokens": counters.tokens_saved}).decode())


if __name__ == "__main__":
    main(sys.argv[1:])
