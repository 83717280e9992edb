"""An inter-process lock around one cassette's read-merge-write.

On POSIX, ``fcntl.flock`` on a lock file, which is all it needs: importing ``filelock``
cost 50-190 ms of the first save in a process (it imports asyncio and decimal), more than
the rest of a spliced save. ``filelock`` is used where ``fcntl`` does not exist (Windows).
Both take ``flock`` on the same file on POSIX, so a process of either kind excludes the
other. The lock file lives in the temp directory, not beside the cassette, so nothing extra
shows in git.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import time
from collections.abc import Iterator
from types import ModuleType

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
    lp = _lock_path(path)
    try:  # a save only: not with the first block (import time)
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        import filelock

        with filelock.FileLock(str(lp), timeout=timeout):
            yield
        return
    fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _flock(fd, fcntl, path, timeout)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _flock(fd: int, fcntl: ModuleType, path: pathlib.Path, timeout: float) -> None:
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
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
