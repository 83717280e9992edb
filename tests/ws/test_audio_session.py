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
