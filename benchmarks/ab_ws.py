"""``bench_ws.py``'s replays of two source trees, interleaved: for comparing a change with
main on a loaded machine, where two runs one after the other differ by more than the change.

    python benchmarks/ab_ws.py BEFORE_ROOT AFTER_ROOT [--rounds 7]

Each tree runs in its own worker process (its ``src`` on ``PYTHONPATH``, its own recording
of the 60-second voice session); every row is timed in the two workers one after the other,
the one going first alternating by round, warm and cold as ``bench_ws.py`` times them.
Prints medians, each divided by the same side's ``read blobs``, and after / before.

    python benchmarks/ab_ws.py BEFORE_ROOT AFTER_ROOT --instructions [--row websockets]

counts instead the instructions one session replay (``replay, session``; or, with ``--row
websockets``, one replay through the real ``websockets`` client) executes in each tree,
under valgrind's callgrind (a process replaying it three times, less one replaying it once,
halved), from one recording both trees replay: a figure the machine's load does not
move, where two interleaved timings on a 2-core box at load 3 differed by more than a
tenth between runs. The hash seed is fixed (0): with a random one, one tree's count moved
by ~0.4% between runs (195.6 to 196.3M).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

WORKER = r"""
import asyncio, json, pathlib, sys, tempfile
root = pathlib.Path(sys.argv[1])
sys.path.insert(0, str(root / "benchmarks"))
import bench_ws as b
import dejacache
from dejacache.cassettes import blobs, format as fmt
from audio_session import voice_session
from fake_realtime import FakeRealtime

path = pathlib.Path(tempfile.mkdtemp()) / "voice.json"
fake = FakeRealtime().start()
try:
    with dejacache.cassette(path, mode="record"):
        asyncio.run(voice_session(fake.base_url, 60.0))
finally:
    fake.stop()
doc = fmt.load_document(path.read_bytes(), path)
folder = blobs.Folder.beside(path)
used = [folder.path(h) for h in sorted(blobs.used_by(doc))]
turns, url = b.client_messages(60.0), fake.base_url
rows = {
    "read blobs": lambda: b.read_blobs(used, False),
    "replay, session": b._in_cassette(path, lambda: b.replay_session(url, turns)),
    "replay, websockets": b._in_cassette(path, lambda: b.replay_websockets(url, turns)),
    "replay, openai SDK": b._in_cassette(path, lambda: voice_session(url, 60.0)),
}
for fn in rows.values():
    fn()
files = [*used, path]
print("ready", flush=True)
for line in sys.stdin:
    kind, name = json.loads(line)
    if kind == "warm":
        b.read_blobs(files, False)  # back in the page cache after a cold round
    print(json.dumps(b._timed(rows[name], files if kind == "cold" else None)), flush=True)
"""
ROWS = ("read blobs", "replay, session", "replay, websockets", "replay, openai SDK")

RECORD = r"""
import asyncio, pathlib, sys
sys.path.insert(0, str(pathlib.Path(sys.argv[1]) / "benchmarks"))
import bench_ws  # puts the tests' fakes on the path
import dejacache
from audio_session import voice_session
from fake_realtime import FakeRealtime
folder = pathlib.Path(sys.argv[2])
fake = FakeRealtime().start()
try:
    with dejacache.cassette(folder / "voice.json", mode="record"):
        asyncio.run(voice_session(fake.base_url, 60.0))
finally:
    fake.stop()
(folder / "url").write_text(fake.base_url)
"""
REPLAY = r"""
import pathlib, sys
sys.path.insert(0, str(pathlib.Path(sys.argv[1]) / "benchmarks"))
import bench_ws as b
folder = pathlib.Path(sys.argv[2])
url, turns = (folder / "url").read_text(), b.client_messages(60.0)
replay = b.replay_websockets if sys.argv[4] == "websockets" else b.replay_session
run = b._in_cassette(folder / "voice.json", lambda: replay(url, turns))
for _ in range(int(sys.argv[3])):
    run()
"""


def _instructions(root: str, folder: str, times: int, env: dict[str, str], row: str) -> int:
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         "-c", REPLAY, root, folder, str(times), row], cwd=root, capture_output=True, text=True,
        env={**env, "PYTHONPATH": os.path.join(root, "src"), "PYTHONHASHSEED": "0"},
        check=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    assert found is not None, out.stderr[-2000:]
    return int(found.group(1))


def count(before: str, after: str, env: dict[str, str], row: str = "session") -> None:
    """Instructions per replay of ``row`` (``session``: through ``AsyncSession``;
    ``websockets``: through the real client) in each tree (see the module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([sys.executable, "-c", RECORD, before, folder], cwd=before, check=True,
                       env={**env, "PYTHONPATH": os.path.join(before, "src")})
        per = {}
        for side, root in (("before", before), ("after", after)):
            # One replay outside valgrind first, to write the tree's bytecode: else the
            # process replaying once compiles what was edited and the difference halves
            # that (an edited tree came out ~24M instructions a replay lighter than it was).
            subprocess.run([sys.executable, "-c", REPLAY, root, folder, "1", row], cwd=root,
                           env={**env, "PYTHONPATH": os.path.join(root, "src")}, check=True)
            once, thrice = (_instructions(root, folder, n, env, row) for n in (1, 3))
            per[side] = (thrice - once) / 2
    print(f"instructions per replay, {row} (callgrind), one recording replayed by both\n")
    print("| before | after | after / before |\n|---|---|---|")
    print(f"| {per['before'] / 1e6:.1f}M | {per['after'] / 1e6:.1f}M "
          f"| {per['after'] / per['before']:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions under callgrind instead of timing")
    ap.add_argument("--row", choices=("session", "websockets"), default="session",
                    help="with --instructions: the replay counted")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    if args.instructions:
        count(args.before, args.after, env, args.row)
        return
    workers = {}
    for side, root in (("before", args.before), ("after", args.after)):
        workers[side] = subprocess.Popen(
            [sys.executable, "-c", WORKER, root], cwd=root, text=True,
            env={**env, "PYTHONPATH": os.path.join(root, "src")},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    for w in workers.values():
        assert w.stdout is not None and w.stdout.readline().strip() == "ready"
    times: dict[tuple[str, str, str], list[float]] = {}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for kind in ("warm", "cold"):
            for name in ROWS:
                for side in order:
                    w = workers[side]
                    assert w.stdin is not None and w.stdout is not None
                    w.stdin.write(json.dumps([kind, name]) + "\n")
                    w.stdin.flush()
                    times.setdefault((side, kind, name), []).append(
                        json.loads(w.stdout.readline()))
    for w in workers.values():
        assert w.stdin is not None
        w.stdin.close()
        w.wait()
    print(f"{args.rounds} rounds, interleaved: median ms (/ read blobs of the same side)\n")
    print("| row | before | after | after / before |\n|---|---|---|---|")
    for kind in ("warm", "cold"):
        floor = {s: statistics.median(times[(s, kind, "read blobs")])
                 for s in ("before", "after")}
        for name in ROWS:
            med = {s: statistics.median(times[(s, kind, name)]) for s in ("before", "after")}
            print(f"| {name}, {kind} | {med['before']:.1f} ({med['before'] / floor['before']:.2f}x)"
                  f" | {med['after']:.1f} ({med['after'] / floor['after']:.2f}x)"
                  f" | {med['after'] / med['before']:.2f} |")


if __name__ == "__main__":
    main()
