"""A 60-second voice session on the OpenAI Realtime protocol: its cassette and blobs, and
its replay against reading its blobs from disk.

    python benchmarks/bench_ws.py [--seconds 60] [--rounds 7]

The session is ``tests/ws/audio_session.py``'s, recorded once through the openai SDK against
the loopback fake (``tests/ws/fake_realtime.py``): 24 kHz PCM16 in 100 ms chunks, a commit and
a 2-second spoken answer every 10 s. Then, with the fake stopped, in interleaved rounds:

* ``read blobs``: every blob file the cassette uses, opened and read (the floor the issue
  names: reading the session's blobs from disk);
* ``read answer blobs``: only the blobs of the server's messages, the ones a replay reads (the
  client's own audio is matched by its key, not read back): the tighter floor;
* ``read + check``: the same with each file's hash checked, as replay checks it;
* ``replay, session``: the session driven through the seam adapters and proxies use
  (``dejacache.ws.AsyncSession``): the handshake, each client message looked up, every server
  message handed out;
* ``replay, session, no blobs``: the same from a cassette recorded with ``blobs=False`` (the
  audio inline), for what keeping payloads beside the file costs a replay;
* ``replay, websockets``: the same messages through the real ``websockets`` client (the
  in-memory endpoint, its frames and the client's own parsing);
* ``replay, openai SDK``: the app-visible replay, the SDK parsing every event into its models;
* ``SDK parses the events``: the SDK's own work alone, the floor of the row above: every
  server event of the session, held in memory as the text the socket delivers, parsed by
  the SDK's ``parse_event`` (JSON into its pydantic models), and every client event built
  and written as the SDK writes it, with no socket and no replay.

Each row is timed warm (the files in the page cache, as a rerun finds them) and cold (the
blob files and the cassette evicted from the page cache first, ``posix_fadvise``
``DONTNEED``: read from the disk, as "reading the blobs from disk" says). Medians and the
slowest round in milliseconds, each replay divided by the ``read blobs`` of its kind
(``--cpu``: the warm rows in CPU time, for a loaded machine).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
for sub in ("tests", "tests/ws"):
    sys.path.insert(0, str(ROOT / sub))

from audio_session import CHUNK, KEY, RATE, user_audio, voice_session  # noqa: E402
from fake_realtime import FakeRealtime  # noqa: E402

import dejacache  # noqa: E402
from dejacache.cassettes import blobs  # noqa: E402
from dejacache.cassettes import format as fmt  # noqa: E402


def client_messages(seconds: float) -> list[list[str]]:
    """The session's client messages, turn by turn, as the SDK writes them."""
    audio = user_audio(seconds)
    turn = RATE * 2 * 10
    turns = []
    for start in range(0, len(audio), turn):
        part = audio[start:start + turn]
        msgs = [json.dumps({"type": "input_audio_buffer.append",
                            "audio": base64.b64encode(part[i:i + CHUNK]).decode()})
                for i in range(0, len(part), CHUNK)]
        msgs += [json.dumps({"type": "input_audio_buffer.commit"}),
                 json.dumps({"type": "response.create"})]
        turns.append(msgs)
    return turns


def _done(data: Any) -> bool:
    return (data if isinstance(data, str) else data.decode()).find('"response.done"') >= 0


async def replay_session(url: str, turns: list[list[str]]) -> int:
    from dejacache.scope import current
    from dejacache.ws import AsyncSession, Closed, Handshake, Message

    hs = Handshake(url.replace("http", "ws", 1) + "/realtime?model=gpt-realtime",
                   [("Authorization", f"Bearer {KEY}"), ("Accept", "application/json"),
                    ("Content-Type", "application/json"), ("Sec-WebSocket-Version", "13")])
    session = AsyncSession(current(), hs, None)
    await session.open()
    got = 0
    for msgs in turns:
        for m in msgs:
            await session.send(Message(m))
        done = False
        while not done:
            for item in (await session.receive(), *session.due()):
                assert not isinstance(item, Closed)
                got += 1
                done = done or _done(item.data)
    await session.close()
    return got


async def replay_websockets(url: str, turns: list[list[str]]) -> int:
    from websockets.asyncio.client import connect

    got = 0
    ws_url = url.replace("http", "ws", 1) + "/realtime?model=gpt-realtime"
    headers = {"Authorization": f"Bearer {KEY}", "Accept": "application/json",
               "Content-Type": "application/json"}  # as the SDK sends them
    async with connect(ws_url, additional_headers=headers, user_agent_header=None,
                       compression=None, max_size=None) as ws:
        for msgs in turns:
            for m in msgs:
                await ws.send(m)
            while True:
                got += 1
                if _done(await ws.recv()):
                    break
    return got


def server_events(doc: dict[str, Any], folder: blobs.Folder) -> list[str]:
    """Every server message the session recorded, as the text its socket delivered."""
    from dejacache.ws._message import message_of

    out = []
    for e in doc["entries"]:
        for _, m in fmt.unpack(e["response"], folder.resolve).get("messages") or ():
            data = message_of(m).data
            out.append(data if isinstance(data, str) else data.decode())
    return out


def sdk_parses(events: list[str], turns: list[list[str]]) -> int:
    """The openai SDK's work in the session without a socket: each client event built and
    written as ``conn.input_audio_buffer.append(...)`` does, each server event parsed."""
    from openai._utils import maybe_transform
    from openai.resources.realtime import realtime as rt

    sent = rt.RealtimeClientEventParam | rt.ResponseCreateEventWithReferencesParam
    for msgs in turns:
        for m in msgs:
            json.dumps(maybe_transform(json.loads(m), sent))
    parse = rt.AsyncRealtimeConnection.parse_event
    return sum(1 for e in events if parse(None, e) is not None)  # type: ignore[arg-type]


def read_blobs(paths: list[pathlib.Path], check: bool) -> int:
    n = 0
    for p in paths:
        with open(p, "rb") as fh:
            data = fh.read()
        if check and blobs.blob_hash(data) != p.name:
            raise AssertionError(p)
        n += len(data)
    return n


def _timed(fn: Callable[[], Any], evict: list[pathlib.Path] | None = None,
           clock: Callable[[], float] = time.perf_counter) -> float:
    if evict:
        for p in evict:  # out of the page cache: the next read goes to the disk
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    t0 = clock()
    fn()
    return (clock() - t0) * 1000


def _in_cassette(path: pathlib.Path, fn: Callable[[], Coroutine[Any, Any, Any]],
                 blobs: bool = True) -> Callable[[], Any]:
    def run() -> Any:
        with dejacache.cassette(path, mode="replay", blobs=blobs):
            return asyncio.run(fn())
    return run


def sizes(path: pathlib.Path, used: list[pathlib.Path], audio_b64: int) -> list[str]:
    blob_bytes = sum(p.stat().st_size for p in used)
    disk = sum(os.stat(p).st_blocks * 512 for p in used)
    size = path.stat().st_size
    return [
        f"audio carried (base64, both ways): {audio_b64:,} bytes",
        f"cassette file: {size:,} bytes ({size / audio_b64:.1%} of the audio)",
        f"blobs used: {len(used):,} files, {blob_bytes:,} bytes "
        f"({blob_bytes / audio_b64:.1%}; {disk:,} bytes allocated on disk)",
        f"cassette + blobs: {size + blob_bytes:,} bytes "
        f"({(size + blob_bytes) / audio_b64:.1%} of the audio)",
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cpu", action="store_true",
                    help="time the warm rows in this process's CPU time (steadier than the "
                         "wall clock on a loaded machine; the cold rows wait for the disk, "
                         "so they stay on the wall clock)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "voice.json"
        inline = pathlib.Path(tmp) / "inline" / "voice.json"
        fake = FakeRealtime().start()
        try:
            with dejacache.cassette(path, mode="record"):
                recorded = asyncio.run(voice_session(fake.base_url, args.seconds))
            with dejacache.cassette(inline, mode="record", blobs=False):
                asyncio.run(voice_session(fake.base_url, args.seconds))
        finally:
            fake.stop()
        doc = fmt.load_document(path.read_bytes(), path)
        folder = blobs.Folder.beside(path)
        used = [folder.path(h) for h in sorted(blobs.used_by(doc))]
        heard: set[str] = set()
        for e in doc["entries"]:
            blobs.blobs_in(e.get("response"), heard)
        answers = [folder.path(h) for h in sorted(heard)]
        lines = sizes(path, used, recorded["audio_bytes"])
        lines.append(f"the same session recorded with blobs=False: "
                     f"{inline.stat().st_size:,} bytes in one file")
        lines.append(f"blobs a replay reads (the server's messages): {len(answers):,} files, "
                     f"{sum(p.stat().st_size for p in answers):,} bytes")
        turns = client_messages(args.seconds)
        events = server_events(doc, folder)
        url = fake.base_url
        rows: dict[str, Callable[[], Any]] = {
            "read blobs": lambda: read_blobs(used, False),
            "read + check": lambda: read_blobs(used, True),
            "read answer blobs": lambda: read_blobs(answers, False),
            "replay, session": _in_cassette(path, lambda: replay_session(url, turns)),
            "replay, session, no blobs": _in_cassette(
                inline, lambda: replay_session(url, turns), blobs=False),
            "replay, websockets": _in_cassette(path, lambda: replay_websockets(url, turns)),
            "replay, openai SDK": _in_cassette(path, lambda: voice_session(url, args.seconds)),
            "SDK parses the events": lambda: sdk_parses(events, turns),
        }
        for fn in rows.values():  # warm: imports, the page cache, the key file
            fn()
        files = [*used, path, inline]
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for kind, evict in (("warm", None), ("cold", files)):
                if evict is None:
                    read_blobs(files, False)  # back in the page cache after a cold round
                for name, fn in rows.items():
                    clock = time.process_time if args.cpu and kind == "warm" else (
                        time.perf_counter)
                    times.setdefault((kind, name), []).append(_timed(fn, evict, clock))
    print(f"# WebSocket voice session, {args.seconds:.0f} s "
          f"({sum(len(t) for t in turns):,} client messages, {len(used):,} blobs)\n")
    for ln in lines:
        print(f"- {ln}")
    print("\n| | median ms | slowest ms | vs read blobs | vs read answer blobs |\n"
          "|---|---|---|---|---|")
    for (kind, name), ts in times.items():
        med = statistics.median(ts)
        floor = statistics.median(times[(kind, "read blobs")])
        tight = statistics.median(times[(kind, "read answer blobs")])
        print(f"| {name}, {kind} | {med:.1f} | {max(ts):.1f} | {med / floor:.2f}x "
              f"| {med / tight:.2f}x |")
    for kind in ("warm", "cold"):
        sdk = statistics.median(times[(kind, "replay, openai SDK")])
        own = statistics.median(times[(kind, "SDK parses the events")])
        print(f"\nreplay through the openai SDK, {kind}: {sdk / own:.2f}x the SDK's own "
              f"work on the same events from memory")


if __name__ == "__main__":
    main()
