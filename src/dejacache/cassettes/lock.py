"""An inter-process lock around one cassette's read-merge-write.

``filelock`` is used when installed (it also works on Windows); otherwise ``fcntl.flock``,
which is all POSIX needs, so the plugin has no hard dependency for xdist safety. The lock
file lives in the temp directory, not beside the cassette, so nothing extra shows in git.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Iterator

import xxhash

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
    try:
        import filelock
    except ImportError:
        filelock = None  # type: ignore[assignment]
    if filelock is not None:
        with filelock.FileLock(str(lp), timeout=timeout):
            yield
        return
    import fcntl  # pragma: no cover - exercised only without filelock

    fd = os.open(lp, os.O_RDWR | os.O_CREAT, 0o644)  # pragma: no cover
    try:  # pragma: no cover
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:  # pragma: no cover
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
