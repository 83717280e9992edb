"""Where a worker's memory sits, for the load harness's soak (``load_server.py`` with
``LOAD_DIAG=1``): resident memory, threads, descriptors and sockets, the C allocator's arenas
(glibc: how much of each arena is in use and how much is free but kept), pymalloc's arenas,
and the sizes of the library's own tables (every dict, list, set and deque reachable from
the ``dejacache`` modules and the server's globals through the library's objects).

A table that keeps growing after warm-up is ours to bound; memory that ``malloc_trim(0)``
hands back is free memory the allocator was keeping, not a leak.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import ctypes.util
import os
import pathlib
import re
import sys
import tempfile
import types
import weakref
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 2**20


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / MIB


def _libc() -> Any:
    with contextlib.suppress(OSError):
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return None


LIBC = _libc()


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def malloc_stats() -> dict[str, Any]:
    """glibc's view: bytes in use and free-but-kept over all arenas, mmapped blocks, and per
    arena (``malloc_info``) its size and free bytes."""
    if LIBC is None or not hasattr(LIBC, "mallinfo2"):
        return {}
    LIBC.mallinfo2.restype = _Mallinfo2
    mi = LIBC.mallinfo2()
    out: dict[str, Any] = {"heap_mib": round(mi.arena / MIB, 2),
                           "in_use_mib": round(mi.uordblks / MIB, 2),
                           "free_kept_mib": round(mi.fordblks / MIB, 2),
                           "mmapped_mib": round(mi.hblkhd / MIB, 2)}
    with tempfile.NamedTemporaryFile(suffix=".xml") as tmp:
        LIBC.fopen.restype = ctypes.c_void_p
        LIBC.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        LIBC.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        LIBC.fclose.argtypes = [ctypes.c_void_p]
        fp = LIBC.fopen(tmp.name.encode(), b"w")
        if fp:
            LIBC.malloc_info(0, fp)
            LIBC.fclose(fp)
            xml = pathlib.Path(tmp.name).read_text()
            arenas = []
            for heap in re.findall(r'<heap nr="\d+">(.*?)</heap>', xml, re.S):
                size = re.search(r'<system type="current" size="(\d+)"', heap)
                free = re.search(r'<total type="rest" count="\d+" size="(\d+)"', heap)
                fast = re.search(r'<total type="fast" count="\d+" size="(\d+)"', heap)
                arenas.append([round(int(size.group(1)) / MIB, 2) if size else 0,
                               round((int(free.group(1)) if free else 0) / MIB
                                     + (int(fast.group(1)) if fast else 0) / MIB, 2)])
            out["arenas"] = arenas  # [size MiB, free MiB] per arena, main first
    return out


def pymalloc_stats() -> dict[str, Any]:
    """pymalloc's arenas (``sys._debugmallocstats``, which writes to the C stderr)."""
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()  # type: ignore[attr-defined]
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    out: dict[str, Any] = {}
    for label, key in (("# arenas allocated current", "arenas"),
                       ("# arenas highwater mark", "arenas_highwater"),
                       ("# bytes in allocated blocks", "allocated_bytes"),
                       ("# bytes in available blocks", "available_bytes")):
        m = re.search(re.escape(label) + r"\s*=\s*([\d,]+)", text)
        if m:
            out[key] = int(m.group(1).replace(",", ""))
    return out


def process_stats() -> dict[str, int]:
    with open("/proc/self/status") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    fds = sockets = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            fds += 1
            sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return {"threads": threads, "fds": fds, "sockets": sockets}


_CONTAINERS = (dict, list, set, frozenset, collections.deque, weakref.WeakKeyDictionary,
               weakref.WeakValueDictionary, weakref.WeakSet)
_SKIP = (types.ModuleType, type, str, bytes, int, float, bool)


def _ours(obj: Any) -> bool:
    return (type(obj).__module__ or "").startswith("dejacache")


def _attrs(obj: Any) -> list[tuple[str, Any]]:
    out = list(getattr(obj, "__dict__", {}).items())
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if name != "__dict__" and hasattr(obj, name):
                out.append((name, getattr(obj, name)))
    return out


def table_sizes(roots: list[types.ModuleType]) -> dict[str, int]:
    """``{path: len}`` of every non-empty container reachable from the ``dejacache`` modules
    and ``roots`` through the library's own objects (containers of the library's objects are
    entered, their sizes summed under one path)."""
    out: dict[str, int] = {}
    seen: set[int] = set()

    def walk(obj: Any, path: str, depth: int) -> None:
        if id(obj) in seen or depth > 6 or isinstance(obj, _SKIP):
            return
        seen.add(id(obj))
        if isinstance(obj, _CONTAINERS):
            n = len(obj)
            if n:
                out[path] = out.get(path, 0) + n
            values = list(obj.values()) if isinstance(obj, (dict, weakref.WeakKeyDictionary,
                                                            weakref.WeakValueDictionary)) \
                else list(obj)
            for v in values[:2000]:
                if _ours(v) or isinstance(v, (*_CONTAINERS, tuple)):
                    walk(v, path + "[]", depth + 1)
            return
        if isinstance(obj, tuple):
            for i, v in enumerate(obj[:8]):
                walk(v, f"{path}[{i}]", depth + 1)
            return
        if isinstance(obj, types.FunctionType):
            for name, v in getattr(obj, "__dict__", {}).items():
                walk(v, f"{path}.{name}", depth + 1)
            for i, cell in enumerate(obj.__closure__ or ()):
                with contextlib.suppress(ValueError):
                    walk(cell.cell_contents, f"{path}<{obj.__code__.co_freevars[i]}>",
                         depth + 1)
            return
        if _ours(obj) or depth == 0:
            for name, v in _attrs(obj):
                walk(v, f"{path}.{name}", depth + 1)

    mods = [m for n, m in list(sys.modules.items()) if n.startswith("dejacache") and m]
    for mod in [*mods, *roots]:
        for name, v in list(vars(mod).items()):
            if not name.startswith("__"):
                walk(v, f"{mod.__name__}.{name}", 0)
    return out


def memory_report(roots: list[types.ModuleType], *, trim: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"rss_mib": round(rss_mib(), 1), **process_stats(),
                           "malloc": malloc_stats(), "pymalloc": pymalloc_stats(),
                           "tables": table_sizes(roots)}
    if trim and LIBC is not None:
        LIBC.malloc_trim(0)
        out["rss_after_trim_mib"] = round(rss_mib(), 1)
    return out
