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
  writes a new file and renames it (``format.atomic_write``).
"""

from __future__ import annotations

import contextlib
import os
import pathlib

import orjson
import xxhash

from . import format as fmt

__all__ = ["append", "recover", "recover_locked"]

_MAGIC = b"dejacache undo 1\n"
#: A test names a step here to have the saving process killed there (os._exit).
CRASH_ENV = "DEJACACHE_TEST_CRASH_AT"
STEPS = ("undo-written", "half-written", "written", "synced")


def recover(path: pathlib.Path) -> None:
    """Roll back an interrupted append under the cassette's lock (a reader found its undo
    record)."""
    from .lock import cassette_lock

    with cassette_lock(path):
        recover_locked(path)


def _record(size: int, at: int, tail: bytes) -> bytes:
    head = orjson.dumps([size, at, _sum(size, at, tail)])
    return _MAGIC + head + b"\n" + tail


def _sum(size: int, at: int, tail: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(f"{size},{at},".encode() + tail)


def _parse(record: bytes) -> tuple[int, int, bytes] | None:
    """``(old size, offset, old bytes)`` of an undo record, None when it is torn."""
    if not record.startswith(_MAGIC):
        return None
    line, nl, tail = record[len(_MAGIC):].partition(b"\n")
    try:
        size, at, check = orjson.loads(line)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        return None
    if not nl or type(size) is not int or type(at) is not int or check != _sum(size, at, tail):
        return None
    return size, at, tail


def recover_locked(path: pathlib.Path) -> bool:
    """Roll back an append that was interrupted (its undo record is there); whether there
    was one. Call it holding the cassette's lock (``lock.cassette_lock``)."""
    up = fmt.undo_path(path)
    try:
        record = up.read_bytes()
    except FileNotFoundError:
        return False
    undo = _parse(record)
    if undo is not None:
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            fd = -1
        if fd >= 0:
            try:
                _restore(fd, *undo)
            finally:
                os.close(fd)
    up.unlink()
    _sync_dir(path)
    return True


def _restore(fd: int, size: int, at: int, tail: bytes) -> None:
    os.pwrite(fd, tail, at)
    os.ftruncate(fd, size)
    os.fsync(fd)


def _sync_dir(path: pathlib.Path) -> None:
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


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
    recover_locked(path)
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
        _write_undo(path, _record(size, at, old))
        _step("undo-written")
        try:
            _overwrite(fd, at, data)
        except BaseException:
            with contextlib.suppress(OSError):
                _restore(fd, size, at, old)
                fmt.undo_path(path).unlink()
            raise
        _step("synced")
        fmt.undo_path(path).unlink()
        _sync_dir(path)
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
    _sync_dir(path)


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
