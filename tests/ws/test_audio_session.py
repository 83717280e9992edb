"""A 60-second voice session (``audio_session.py``) through the openai SDK's Realtime API:
its cassette is a small fraction of the audio it carried, the same user audio recorded by
two tests is kept once, and it replays with the fake stopped. (Replay time against reading
the blobs is measured by ``benchmarks/bench_ws.py``, not here.)"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Iterator

import pytest

pytest.importorskip("openai")

from audio_session import CHUNK, voice_session
from fake_realtime import FakeRealtime

import dejacache


@pytest.fixture
def realtime() -> Iterator[FakeRealtime]:
    fake = FakeRealtime().start()
    yield fake
    fake.stop()


def test_a_60_second_voice_session_is_smaller_than_its_audio_and_keeps_it_once(
        tmp_path: pathlib.Path, realtime: FakeRealtime) -> None:
    folder = tmp_path / "cassettes"
    first, second = folder / "first.json", folder / "second.json"
    with dejacache.cassette(first, mode="record"):
        recorded = asyncio.run(voice_session(realtime.base_url, 60.0))
    with dejacache.cassette(second, mode="record"):  # another test, the same user audio
        asyncio.run(voice_session(realtime.base_url, 60.0))
    audio = recorded["audio_bytes"]
    chunks = 60 * 10  # 100 ms each
    answers = len(recorded["deltas"])
    assert audio >= (chunks + answers) * (CHUNK * 4 // 3)
    assert first.stat().st_size < audio / 5  # references, not audio (measured: ~12%)
    blobs = [f for f in (folder / "blobs").rglob("*") if f.is_file()]
    # the user's 600 chunks once for both tests, each test's fresh answers once each
    assert len(blobs) == chunks + 2 * answers
    realtime.stop()
    with dejacache.cassette(first, mode="replay") as tape:
        replayed = asyncio.run(voice_session(realtime.base_url, 60.0))
    assert replayed["deltas"] == recorded["deltas"]
    assert replayed["transcripts"] == recorded["transcripts"]
    assert tape.counters.replayed == 1 + chunks + 6 * 2  # handshake, appends, commits, asks


def test_an_audio_chunk_that_differs_by_one_character_is_a_miss(
        tmp_path: pathlib.Path, realtime: FakeRealtime) -> None:
    """The id scan passes over audio payloads; matching still reads them: a chunk that
    differs in one base64 character misses, with the session's ids known (the server named
    ``sess_``/``item_`` ids before it) and in a message that names an id too."""
    import base64
    import json
    import random

    from websockets.asyncio.client import connect

    from dejacache.errors import ReplayMiss

    chunks = [base64.b64encode(random.Random(n).randbytes(CHUNK)).decode() for n in range(3)]
    url = realtime.base_url.replace("http", "ws", 1) + "/realtime?model=gpt-realtime"

    async def run(last: str) -> list[str]:
        heard = []
        async with connect(url, additional_headers={"Authorization": "Bearer sk-x"}) as ws:
            created = json.loads(await ws.recv())
            for c in chunks[:2]:
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": c}))
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            for _ in range(2):  # committed, item added
                heard.append(json.loads(await ws.recv())["type"])
            await ws.send(json.dumps({
                "type": "conversation.item.create",
                "previous_item_id": created["session"]["id"],
                "item": {"type": "message", "role": "user",
                         "content": [{"type": "input_audio", "audio": last}]}}))
            heard.append(json.loads(await ws.recv())["type"])
        return heard

    path = tmp_path / "differs.json"
    with dejacache.cassette(path, mode="record"):
        recorded = asyncio.run(run(chunks[2]))
    realtime.stop()
    with dejacache.cassette(path, mode="replay"):
        assert asyncio.run(run(chunks[2])) == recorded
    flipped = chunks[2][:100] + ("A" if chunks[2][100] != "A" else "B") + chunks[2][101:]
    with dejacache.cassette(path, mode="replay"), pytest.raises(ReplayMiss) as miss:
        asyncio.run(run(flipped))
    assert "body.item.content[0].audio: differs at offset 100" in str(miss.value)
