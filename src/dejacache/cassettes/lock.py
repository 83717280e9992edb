"""An inter-process lock around one cassette's read-merge-write.

On POSIX, ``fcntl.flock`` on a lock file, which is all it needs: importing ``filelock``
cost 50-190 ms of the first save in a process (it imports asyncio and decimal), more than
the rest of a spliced save. ``filelock`` is used where ``fcntl`` does not exist (Windows).
Both take ``flock`` on the same file on POSIX, so a process of either kind excludes the
other. The lock file lives in the temp directory, not beside the cassette, so nothing extra
shows in git. Ctrl-C waits while the lock is held (``_Interrupts``): every write happens
under it, and one interrupted half-way left a descriptor, a temp file or the lock itself
behind (found by raising SIGINT at each call and return of a save in turn).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import threading
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import xxhash

from ..errors import CassetteError

__all__ = ["cassette_lock"]


def _lock_path(path: pathlib.Path) -> pathlib.Path:
    # Here, not at module level: tempfile (with shutil, random, bz2, lzma) was ~4 ms of the
    # first cassette block, which takes the lock only when it writes.
    import tempfile

    d = pathlib.Path(tempfile.gettempdir()) / "dejacache-locks"
    d.mkdir(parents=True, exist_ok=True)
    return d / (xxhash.xxh3_64_hexdigest(str(path.resolve()).encode()) + ".lock")


@contextlib.contextmanager
def cassette_lock(path: pathlib.Path, timeout: float = 60.0) -> Iterator[None]:
    """Hold the cassette's lock. Ctrl-C (SIGINT) waits while it is held, and is delivered
    when it has been released: what is done under the lock (a temp file renamed, an undo
    record removed, the lock's own descriptor closed) is never left half-done by it. A
    Ctrl-C while waiting for the lock stops the wait."""
    lp = _lock_path(path)
    try:  # a save only: not with the first block (import time)
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import filelock

        with filelock.FileLock(str(lp), timeout=timeout):
            held = _Interrupts()
            try:
                yield
            finally:
                held.deliver()
        return
    held = _Interrupts()  # from before the open: no descriptor can be lost to an interrupt
    try:
        fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            _flock(fd, fcntl, path, timeout, held)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        held.deliver()


def _flock(fd: int, fcntl: ModuleType, path: pathlib.Path, timeout: float,
           held: _Interrupts) -> None:
    """Take the lock, waiting at most ``timeout`` seconds (a writer holds it for one save:
    milliseconds; a minute means a stuck process, which is named rather than waited on)."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise CassetteError(f"another process has held this cassette's lock for "
                                    f"{timeout:.0f} s; the calls recorded in this block are "
                                    "not saved", path=path) from None
            held.deliver()  # nothing is held while waiting: a Ctrl-C meanwhile stops it here
            time.sleep(pause)
            held.hold()
            pause = min(pause * 2, 0.05)


class _Interrupts:
    """SIGINT held from construction to :meth:`deliver`: one arriving meanwhile is noted,
    then delivered to the handler that was there before (``KeyboardInterrupt``, by default).

    Python runs signal handlers in the main thread only, so no ``KeyboardInterrupt`` lands
    in any other thread, and there nothing is held. A handler not installed from Python is
    left alone. Two ``signal.signal`` calls, a few microseconds, against a save's
    milliseconds."""

    __slots__ = ("caught", "previous")

    def __init__(self) -> None:
        self.caught = False
        self.previous: Any = None
        self.hold()

    def hold(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        import signal

        previous = signal.getsignal(signal.SIGINT)
        if previous is None:
            return
        try:
            signal.signal(signal.SIGINT, self._note)
        except ValueError:  # not the main interpreter
            return
        self.previous = previous

    def _note(self, signum: int, frame: object) -> None:
        self.caught = True

    def deliver(self) -> None:
        """End the hold; a SIGINT that arrived meanwhile is delivered now."""
        previous = self.previous
        if previous is None:
            return
        import signal

        self.previous = None
        signal.signal(signal.SIGINT, previous)
        if self.caught:
            self.caught = False
            signal.raise_signal(signal.SIGINT)
