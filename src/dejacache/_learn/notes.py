"""The rules replay misses suggested in the last test run, for ``dejacache learn --from-miss``.

The pytest plugin writes them at the end of a session (``learn-misses.json`` in the cache
directory, one file per xdist worker) and removes the last run's when a session starts, so
what ``--from-miss`` applies is what the run just before it printed.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable
from typing import Any, Final

from .._paths import NOTES, note_files

__all__ = ["FILE", "clear", "read", "write"]

FILE: Final = NOTES


def clear(directory: pathlib.Path | None) -> None:
    for p in note_files(directory) if directory is not None else []:
        p.unlink(missing_ok=True)


def write(directory: pathlib.Path | None, notes: Iterable[dict[str, Any]],
          worker: str | None = None) -> pathlib.Path | None:
    """Keep ``notes`` (``{"rules", "cassette", "name", "key"}``); None when there are none
    or persistence is off."""
    items = list(notes)
    if directory is None or not items:
        return None
    import orjson  # (clear runs in every pytest session; orjson only here)

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (f"{FILE}.{worker}.json" if worker else f"{FILE}.json")
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps(items, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)
    return path


def read(directory: pathlib.Path | None) -> list[dict[str, Any]]:
    import orjson

    out: list[dict[str, Any]] = []
    for p in note_files(directory) if directory is not None else []:
        try:
            data = orjson.loads(p.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        out += [d for d in data if isinstance(d, dict) and isinstance(d.get("rules"), list)]
    return out
