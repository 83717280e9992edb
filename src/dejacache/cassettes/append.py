"""Saving by appending in place: the undo record, and rolling back an interrupted append.

An append (format 4, see format.py) writes a new segment and the last member over the old
last member, ``xref_at``; every byte before it stays. What makes that safe:

* Crash: before the first byte is overwritten, an undo record beside the file
  (``.<name>.undo``: the old size and the bytes about to be overwritten, checksummed) is
  written and synced. Whoever next reads or writes the file finds it and rolls the file back
  (restores those bytes, truncates to the old size) under the cassette's lock, before
  anything else: the file then holds exactly the entries it held before the save. The
  record is deleted once the new bytes are synced; a torn record (killed while writing it)
  fails its checksum and is deleted, the file not having been touched yet.
* Readers take no lock. ``format.read_file`` keeps what it read only when no undo record
  was there before or after the read and the file's size and times did not change meanwhile
  (an append always grows the file, and holds its undo record from before its first write
  to after its last): otherwise it reads again under the cassette's lock, which an append
  holds throughout. A reader that mapped the file before an append keeps reading the old
  file: the bytes before the old ``xref_at`` never change, and that member is in the copy
  of the file's last bytes it took (``format.Mapped``). A rollback truncates to the size
  the file had before the append, which no reader kept a mapping beyond: the one window is
  a reader of the half-written file, which finds the undo record and reads again.
* Where ``os.pwrite`` does not exist (Windows) nothing is appended in place: every save
  writes a new file and renames it (``atomic.atomic_write``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib

from ..errors import CassetteError
from . import format as fmt

__all__ = ["append"]

#: A test names a step here to have the saving process killed there (os._exit).
CRASH_ENV = "DEJACACHE_TEST_CRASH_AT"
STEPS = ("undo-written", "half-written", "written", "synced")


def _step(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os._exit(75)


def append(path: pathlib.Path, at: int, data: bytes, baseline: tuple[int, ...] | None
           ) -> bool:
    """Write ``data`` over the file from byte ``at`` (its last member) to its new end, if
    it is still the file read (``baseline``, its ``format.identity``); whether it was
    written (False: the caller writes the file whole). Call it holding the cassette's
    lock."""
    if not hasattr(os, "pwrite"):  # pragma: no cover - Windows
        return False
    fmt.recover_locked(path)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        size = os.fstat(fd).st_size
        if fmt.identity(path, fd) != baseline or not 0 < size - at <= fmt.FROZEN_TAIL \
                or at + len(data) < size:
            return False
        old = os.pread(fd, size - at, at)
        try:
            _write_undo(path, fmt.undo_record(size, at, old))
        except OSError:  # nothing overwritten yet: the whole write says what is wrong
            with contextlib.suppress(OSError):
                fmt.undo_path(path).unlink()
            return False
        _step("undo-written")
        try:
            _overwrite(fd, at, data)
        except BaseException as exc:
            with contextlib.suppress(OSError):  # (else the next reader rolls it back)
                fmt.restore_tail(fd, size, at, old)
                fmt.undo_path(path).unlink()
            if isinstance(exc, OSError):
                raise CassetteError(f"cannot write the cassette: {exc.strerror or exc}; "
                                    "the calls recorded in this block are not saved",
                                    path=path) from None
            raise
        _step("synced")
        fmt.undo_path(path).unlink()
        fmt.sync_dir(path)
        return True
    finally:
        os.close(fd)


def _write_undo(path: pathlib.Path, record: bytes) -> None:
    fd = os.open(fmt.undo_path(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(record)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    fmt.sync_dir(path)


def _overwrite(fd: int, at: int, data: bytes) -> None:
    half = len(data) // 2 if os.environ.get(CRASH_ENV) == "half-written" else len(data)
    done = 0
    while done < half:
        done += os.pwrite(fd, data[done:half], at + done)
    _step("half-written")
    while done < len(data):
        done += os.pwrite(fd, data[done:], at + done)
    os.ftruncate(fd, at + len(data))
    _step("written")
    os.fsync(fd)
