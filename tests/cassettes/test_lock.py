"""The cassette lock: exclusive across processes, bounded, and shared with ``filelock``."""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest

import dejacache
from dejacache.cassettes import format as fmt
from dejacache.cassettes import lock
from dejacache.cassettes.lock import _lock_path, cassette_lock
from dejacache.cassettes.store import Cassette
from dejacache.errors import CassetteError

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")


def test_a_held_lock_is_waited_for_at_most_the_timeout_then_named(
        tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    # flock belongs to the open file: a second open in the same process conflicts
    with cassette_lock(p), pytest.raises(CassetteError) as info, \
            cassette_lock(p, timeout=0.05):
        pass
    assert str(p) in str(info.value) and "lock" in str(info.value)
    with cassette_lock(p, timeout=0.05):  # released: taken at once
        pass


def test_a_filelock_holder_excludes_the_fcntl_path(tmp_path: pathlib.Path) -> None:
    filelock = pytest.importorskip("filelock")
    p = tmp_path / "c.json"
    with filelock.FileLock(str(_lock_path(p))), \
            pytest.raises(CassetteError), cassette_lock(p, timeout=0.05):
        pass


# ---------------------------------------------------------------- many writers, in turn

_HOLD = textwrap.dedent("""
    import pathlib, sys
    from dejacache.cassettes.lock import cassette_lock
    with cassette_lock(pathlib.Path(sys.argv[1]), timeout=60):
        print("held", flush=True)
        if sys.argv[2] == "hold":
            sys.stdin.read()  # until the test closes it
        else:
            with open(sys.argv[2], "a") as log:
                log.write(sys.argv[3] + " ")
""")


def _process(p: pathlib.Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _HOLD, str(p), *args], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


@contextlib.contextmanager
def _held_by_another_process(p: pathlib.Path) -> Any:
    proc = _process(p, "hold")
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc.pid
    finally:
        proc.communicate(timeout=30)


def _until(what: Any) -> None:
    deadline = time.monotonic() + 30
    while not what():
        assert time.monotonic() < deadline, "not reached in 30 s"
        time.sleep(0.01)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the queue is Linux's")
def test_waiters_take_the_lock_in_the_order_they_came(tmp_path: pathlib.Path) -> None:
    # Each waiter starts once the one before it is queued; the lock then goes to them in
    # that order. Polling with backoff gave it to whichever polled first after a release.
    p, log = tmp_path / "c.json", tmp_path / "order"
    waiters = []
    with cassette_lock(p):
        for i in range(5):
            waiters.append(_process(p, str(log), str(i)))
            _until(lambda: lock.queued(p) == len(waiters) + 1)  # (this test's turn, held)
    for w in waiters:
        w.communicate(timeout=60)
    assert log.read_text().split() == ["0", "1", "2", "3", "4"]
    assert lock.queued(p) == 0


def test_a_process_that_keeps_saving_does_not_starve_a_waiter(tmp_path: pathlib.Path) -> None:
    # A writer saving in a loop takes the lock again right after each release. It is
    # queued behind the waiter, so it goes at most once more before it: main's waiter,
    # polling every 50 ms, found the lock free once in ~10 s of such saves, or timed out
    # (the block's recording lost).
    p = tmp_path / "c.json"
    turns: list[int] = []
    stop = threading.Event()

    def keep_saving() -> None:
        while not stop.is_set():
            with cassette_lock(p):
                turns.append(1)
                time.sleep(0.02)  # a save

    hog = threading.Thread(target=keep_saving)
    hog.start()
    try:
        _until(lambda: len(turns) >= 3)
        before = len(turns)
        with cassette_lock(p, timeout=20):
            during = len(turns) - before
    finally:
        stop.set()
        hog.join()
    assert during <= 1


def test_with_no_thread_to_wait_in_the_wait_polls(tmp_path: pathlib.Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # An interpreter that is exiting starts no thread: a save there still waits its turn.
    def no_thread(turn: Any) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(lock, "_Waiter", no_thread)
    p = tmp_path / "c.json"
    with _held_by_another_process(p), pytest.raises(CassetteError, match=r"waited 0\.2 s"), \
            cassette_lock(p, timeout=0.2):
        pass
    with cassette_lock(p, timeout=5):  # released: taken
        pass


_WRITER = textwrap.dedent("""
    import sys, dejacache
    path, me = sys.argv[1], sys.argv[2]

    @dejacache.cache(name="llm")
    def llm(q):
        return {"answer": q}

    for b in range(3):
        with dejacache.cassette(path, shared=True, mode="auto"):
            for i in range(3):
                llm(f"writer {me} block {b} call {i}")
""")


def test_many_writers_on_one_shared_cassette_lose_no_block(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "shared.json"
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(p), str(k)], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for k in range(12)]
    errors = [err for proc in procs for err in [proc.communicate(timeout=120)[1]]
              if proc.returncode != 0]
    assert errors == []
    answered = sorted(step.response["answer"] for step in dejacache.load_cassette(p).steps)
    assert answered == sorted(f"writer {k} block {b} call {i}"
                           for k in range(12) for b in range(3) for i in range(3))


# ---------------------------------------------------------------- a wait that times out


def test_a_timeout_says_how_long_it_waited_who_holds_the_lock_and_who_waits(
        tmp_path: pathlib.Path) -> None:
    # Main's message blamed "one stuck process" whatever held the lock.
    p = tmp_path / "c.json"
    with _held_by_another_process(p) as pid:
        waiting = threading.Thread(target=_wait_out, args=(p, 1.5))
        waiting.start()
        if sys.platform.startswith("linux"):
            _until(lambda: lock.queued(p) == 2)
        with pytest.raises(CassetteError) as info, cassette_lock(p, timeout=0.3,
                                                                   unsaved="nothing done"):
            pass
        waiting.join()
    message = str(info.value)
    assert "waited 0.3 s for this cassette's lock" in message
    assert f"process {pid} has held it for " in message
    if sys.platform.startswith("linux"):
        assert "1 more waiting ahead of this one, 0 behind it" in message
    assert message.endswith(f"; nothing done (cassette {p})")
    assert "stuck" not in message


def _wait_out(p: pathlib.Path, timeout: float) -> None:
    with contextlib.suppress(CassetteError), cassette_lock(p, timeout=timeout):
        pass


def test_a_save_that_times_out_says_which_calls_are_lost_and_the_summary_names_them(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        told: list[tuple[pathlib.Path, str]]) -> None:
    monkeypatch.setattr(lock, "TIMEOUT_S", 0.3)
    p = tmp_path / "c.json"
    with _held_by_another_process(p), pytest.raises(CassetteError) as info, \
            dejacache.cassette(p, shared=True):
        _tool(1)
        _tool(2)
    assert "waited 0.3 s" in str(info.value)
    assert "the 2 calls this block recorded are not saved" in str(info.value)
    assert told == [(p, f"recording discarded (the save failed): 2 calls not written to {p}")]
    assert not p.exists()


def test_a_reader_that_times_out_is_told_it_read_nothing_not_that_calls_are_lost(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A reader takes the lock only when an append overlapped its read (an undo record).
    monkeypatch.setattr(lock, "TIMEOUT_S", 0.3)
    p = tmp_path / "c.json"
    p.write_bytes(b"{}")
    fmt.undo_path(p).write_bytes(b"")
    with _held_by_another_process(p), pytest.raises(CassetteError) as info:
        fmt.read_file(p)
    assert "the cassette was not read" in str(info.value)
    assert "not saved" not in str(info.value) and "recorded" not in str(info.value)


# ---------------------------------------------------------------- Ctrl-C


def _lock_is_free(p: pathlib.Path) -> bool:
    import fcntl
    import os

    fd = os.open(_lock_path(p), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_ctrl_c_under_the_lock_is_delivered_once_it_is_released(
        tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    done = []
    with pytest.raises(KeyboardInterrupt), cassette_lock(p):
        signal.raise_signal(signal.SIGINT)
        done.append("the write under the lock finished")
    assert done == ["the write under the lock finished"]
    assert _lock_is_free(p)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_under_the_lock_goes_to_the_handler_that_was_there(
        tmp_path: pathlib.Path) -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with cassette_lock(tmp_path / "c.json"):
            signal.raise_signal(signal.SIGINT)
            assert seen == []
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_waiting_for_the_lock_stops_the_wait(tmp_path: pathlib.Path) -> None:
    # The lock is held by another open file; the wait gets SIGINT when its first try fails.
    p = tmp_path / "c.json"

    def interrupt_the_wait(frame: Any, event: str, arg: Any) -> None:
        if event == "c_exception" and getattr(arg, "__name__", "") == "flock":
            sys.setprofile(None)
            signal.raise_signal(signal.SIGINT)

    import fcntl

    holder = os.open(_lock_path(p), os.O_RDWR | os.O_CREAT)
    t0 = time.monotonic()
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        sys.setprofile(interrupt_the_wait)
        try:
            with pytest.raises(KeyboardInterrupt), cassette_lock(p, timeout=30):
                pass
        finally:
            sys.setprofile(None)
    finally:
        os.close(holder)
    assert time.monotonic() - t0 < 5
    # (the wait's helper thread gets the lock when the holder closes, and lets it go at once)
    assert _free_soon(p)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _free_soon(p: pathlib.Path) -> bool:
    for _ in range(500):
        if _lock_is_free(p):
            return True
        time.sleep(0.01)
    return False


def test_a_lock_taken_outside_the_main_thread_leaves_signals_alone(
        tmp_path: pathlib.Path) -> None:
    seen = []

    def save() -> None:
        with cassette_lock(tmp_path / "c.json"):
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=save)
    t.start()
    t.join()
    assert seen == [signal.default_int_handler]


@dejacache.cache(name="tool", kind="tool")
def _tool(q: int) -> dict[str, int]:
    return {"answer": q * 2}


# What each save does: the calls of the block that saves, over a file holding calls 1-3
# (none for "new"). Appended in place, spliced (a new call before the old ones), written
# whole (re-recorded; pruned; a new file).
_SAVES = {"new": [1, 2, 3], "append": [1, 2, 3, 4, 5], "splice": [0, 1, 2, 3],
          "record": [1, 2, 3, 4], "prune": [1, 4]}
_OS_MODULES = ("posix", "fcntl")


def _tape_to_save(path: pathlib.Path, kind: str, old: bytes | None) -> Cassette:
    if old is not None:
        path.write_bytes(old)
    blk = dejacache.cassette(path, "record" if kind == "record" else "auto",
                             prune=kind == "prune")
    handed: list[Cassette] = []
    blk.defer_save = lambda tape, ok: handed.append(tape)  # saved by the trial, not the exit
    with blk:
        for q in _SAVES[kind]:
            _tool(q)
    return handed[0]


def _saves_own(new: set[str], here: pathlib.Path, path: pathlib.Path) -> list[int]:
    """Of the descriptors opened since a trial began, those a save of ``path`` opens: a file
    in its directory (the cassette, a temp file, the directory synced) or its lock file.
    Other threads of this worker (another test's servers and clients) open descriptors at
    any moment: counted, one was taken for a leak at a point where a save opens nothing,
    and closing it closed a descriptor that thread still used."""
    mine = (str(here), str(_lock_path(path)))
    out = []
    for fd in new:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since it was listed: not left open
            continue
        if target.startswith(mine):
            out.append(int(fd))
    return out


def _save_interrupted_at(tape: Cassette, at: int) -> tuple[list[str], bool]:
    """Save with SIGINT raised at the ``at``-th point where CPython handles a pending signal
    (a function entered, a call returned; not a generator's yield, where it never runs
    one); the points seen, and whether ``KeyboardInterrupt`` came out."""
    points: list[str] = []
    gen_flags = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" or event == "c_return" or (
                event == "return" and not frame.f_code.co_flags & gen_flags):
            points.append(f"{event} {getattr(arg, '__module__', '')}.{getattr(arg, '__name__', '')}"
                          if event == "c_return" else event)
            if len(points) == at:
                signal.raise_signal(signal.SIGINT)

    # The collector stays off during the save: a collection runs the finalizers of whatever
    # garbage the process holds (another test's suspended generators, objects with __del__),
    # whose calls are points too. The n-th point of a trial was then not the n-th of the run
    # that listed them (the SIGINT landed elsewhere, or inside a finalizer, which swallows
    # it): a full run failed so, and 300 garbage generators per trial fail it every time.
    was_on = gc.isenabled()
    gc.disable()
    sys.setprofile(profile)
    try:
        tape.save()
    except KeyboardInterrupt:
        return points, True
    finally:
        sys.setprofile(None)
        if was_on:
            gc.enable()
        tape.close()
    return points, False


def _entries(path: pathlib.Path) -> list[tuple[str, int]] | None:
    from dejacache.cassettes import format as fmt
    from dejacache.cassettes.document import load_document

    data = fmt.read_file(path)  # (rolls back an append that was cut short)
    if data is None:
        return None
    return sorted((e["key"], e["occurrence"]) for e in load_document(data, path)["entries"])


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors")
@pytest.mark.parametrize("kind", sorted(_SAVES))
def test_ctrl_c_anywhere_in_a_save_leaves_the_old_or_the_new_file_and_nothing_else(
        tmp_path: pathlib.Path, kind: str) -> None:
    # SIGINT is raised at each call and return of the save where the OS is called (an open
    # whose descriptor was then lost, a rename, the lock), and at every 16th other one.
    # Each time the file holds its old entries or the new ones, and nothing is left open,
    # locked or lying beside it. Main's code lost the descriptors of the lock file, the
    # temp file (left on disk) and the directory synced, at those points.
    template = tmp_path / "template.json"
    if kind != "new":
        with dejacache.cassette(template):
            for q in (1, 2, 3):
                _tool(q)
    old = template.read_bytes() if kind != "new" else None
    for first in (True, False):  # (the first save in a process imports what it uses)
        warm = tmp_path / f"warm{first}" / "c.json"
        warm.parent.mkdir()
        points, _ = _save_interrupted_at(_tape_to_save(warm, kind, old), 0)
    before, after = _entries(template) if old else None, _entries(warm)
    assert before != after
    chosen = [i + 1 for i, p in enumerate(points)
              if p.startswith(("c_return posix.", "c_return fcntl.")) or i % 16 == 0]
    problems = []
    for at in chosen:
        here = tmp_path / f"at{at}"
        here.mkdir()
        path = here / "c.json"
        tape = _tape_to_save(path, kind, old)
        fds = set(os.listdir("/proc/self/fd"))
        _, interrupted = _save_interrupted_at(tape, at)
        what = points[at - 1]
        leaked = _saves_own(set(os.listdir("/proc/self/fd")) - fds, here, path)
        for fd in leaked:  # (closed: the next trial must not inherit them)
            with contextlib.suppress(OSError):
                os.close(fd)
        beside = sorted(p.name for p in here.iterdir() if p.name != "c.json")
        found = {"interrupted": interrupted, "lock free": _lock_is_free(path),
                 "old or new": _entries(path) in (before, after),
                 "no descriptor left open": not leaked, "nothing beside": not beside}
        problems += [f"SIGINT at {what} (#{at}): not {k}" for k, ok in found.items() if not ok]
    assert problems == [], f"{len(chosen)} trials:\n" + "\n".join(problems)
