"""A 60-second voice session on the openai SDK's Realtime API, for the size test and the
benchmark (``benchmarks/bench_ws.py``).

The user speaks for ``seconds`` (24 kHz PCM16 noise, seeded, so two runs send the same
bytes) in 100 ms ``input_audio_buffer.append`` chunks, committing every 10 s and asking for
an answer, which the fake speaks for 2 s in 100 ms deltas. ``audio_bytes`` is the base64
audio the session carried both ways: what a cassette without blobs would hold at least.
"""

from __future__ import annotations

import base64
import random
from typing import Any

RATE = 24000
CHUNK = RATE * 2 // 10  # 100 ms of PCM16
KEY = "sk-proj-audioSESSIONkey0123456789abcdefghij"


def user_audio(seconds: float, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(int(seconds * RATE) * 2)


async def voice_session(base_url: str, seconds: float = 60.0, seed: int = 7) -> dict[str, Any]:
    """Run the session; returns what the app heard and the base64 audio both ways."""
    import openai

    audio = user_audio(seconds, seed)
    sent = heard = 0
    transcripts: list[str] = []
    deltas: list[str] = []
    client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    async with client.realtime.connect(model="gpt-realtime") as conn:
        turn = RATE * 2 * 10
        for start in range(0, len(audio), turn):
            part = audio[start:start + turn]
            for i in range(0, len(part), CHUNK):
                chunk = base64.b64encode(part[i:i + CHUNK]).decode()
                sent += len(chunk)
                await conn.input_audio_buffer.append(audio=chunk)
            await conn.input_audio_buffer.commit()
            await conn.response.create()
            async for event in conn:
                if event.type == "response.output_audio.delta":
                    heard += len(event.delta)
                    deltas.append(event.delta)
                elif event.type == "response.output_audio_transcript.done":
                    transcripts.append(event.transcript)
                elif event.type == "response.done":
                    break
    await client.close()
    return {"transcripts": transcripts, "deltas": deltas, "audio_bytes": sent + heard}
