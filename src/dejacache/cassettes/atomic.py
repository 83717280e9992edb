"""Replacing a cassette file whole so that it holds its old bytes or the new ones, never a
mix (a temp file, synced, renamed over it), and cleaning up the temp files of a writer
that was killed. An append in place (``append.py``) is the other way a save writes.

Apart from format.py, which reads files: a replay block never writes, so it never loads
this module.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
from typing import Final

from ..errors import CassetteError
from .format import sync_dir

__all__ = ["Part", "atomic_write", "atomic_write_parts", "remove_stale_temps", "side_file"]

#: What a spliced save writes: new bytes, or a ``(start, stop)`` range of the file it read.
Part = bytes | tuple[int, int]


def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write ``data`` so that ``path`` holds either its old bytes or ``data``, never a mix.

    An unwritable place is a :class:`~dejacache.CassetteError` naming the cassette and why
    (a raw ``PermissionError`` named only the temp file, at a test's teardown)."""
    atomic_write_parts(path, [data], -1)


def atomic_write_parts(path: pathlib.Path, parts: list[Part], source: int) -> None:
    """:func:`atomic_write` of the concatenation of ``parts``, a range ``(start, stop)``
    being copied from the open file ``source`` by the kernel (a spliced save copies the
    untouched bulk of a 40 MB cassette without bringing it into Python: ~30 ms where
    writing the same bytes from a memory map took ~120 ms)."""
    try:
        _atomic_write(path, parts, source)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        where = path.parent if exc.filename != str(path) else path
        raise CassetteError(f"cannot write the cassette: {why} in {where}; the calls recorded "
                            "in this block are not saved", path=path) from None


def _write_parts(fd: int, parts: list[Part], source: int) -> None:
    for part in parts:
        if isinstance(part, tuple):
            _copy_range(source, fd, *part)
        else:
            _write_all(fd, part)


def _copy_range(source: int, fd: int, start: int, stop: int) -> None:
    while start < stop:
        try:
            n = os.copy_file_range(source, fd, stop - start, start)
        except (AttributeError, OSError):  # no such call here, or not between these files
            n = _write_all(fd, _read_at(source, min(stop - start, 1 << 22), start))
        if n <= 0:
            raise OSError(f"the cassette being copied ended early at byte {start}")
        start += n


def _read_at(fd: int, n: int, at: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, n, at)
    os.lseek(fd, at, os.SEEK_SET)  # pragma: no cover - Windows
    return os.read(fd, n)  # pragma: no cover


def _write_all(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    return len(data)


def _atomic_write(path: pathlib.Path, parts: list[Part], source: int) -> None:
    if path.is_symlink():  # the file it names is replaced: renamed over, the link became a copy
        path = pathlib.Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = path.parent / f".{path.name}.{os.urandom(8).hex()}.tmp"
        try:  # the usual file mode (umask applies), not mkstemp's 0600
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue
    try:
        try:
            _write_parts(fd, parts, source)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_dir(path)  # the rename itself made durable


# The tail of the temp files' names (after ``.<name>``): ``atomic_write``'s 16 hex digits, and
# mkstemp's 8 characters from earlier versions.
_TEMP_TAIL: Final = r"\.(?:[0-9a-f]{16}|[a-z0-9_]{8})\.tmp"


def side_file(name: str) -> str:
    """What a file named ``name`` is when a save writes it beside a cassette: ``"undo"``
    (an append's undo record, ``format.undo_path``), ``"temp"`` (a temporary file of
    :func:`atomic_write`), or ``""`` (neither)."""
    if name.startswith(".") and name.endswith(".undo"):
        return "undo"
    if name.startswith(".") and re.fullmatch(r"\..+" + _TEMP_TAIL, name):
        return "temp"
    return ""


def remove_stale_temps(path: pathlib.Path) -> int:
    """Delete the temp files of ``path`` that a writer killed mid-write left behind; returns
    how many. Call it only while holding the cassette's lock (``lock.cassette_lock``): every
    writer of a cassette holds that lock from its temp file's creation to its rename, so no
    live write owns one. Only names :func:`atomic_write` makes for this exact file match
    (``.<name>.<16 hex>.tmp``, and mkstemp's ``.<name>.<8 chars>.tmp`` from earlier
    versions): a cassette whose name extends this one's keeps its temp files."""
    import glob  # on a write only, not with the first block (import time)

    exact = re.compile(re.escape(f".{path.name}") + _TEMP_TAIL)
    removed = 0
    for p in path.parent.glob(glob.escape(f".{path.name}.") + "*.tmp"):
        if exact.fullmatch(p.name):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed += 1
    return removed
