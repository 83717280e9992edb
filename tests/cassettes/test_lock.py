"""The cassette lock: exclusive across processes, bounded, and shared with ``filelock``."""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import pathlib
import signal
import sys
import threading
import time
from typing import Any

import pytest

import dejacache
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
    assert _lock_is_free(p)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


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
