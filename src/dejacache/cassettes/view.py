"""Whole cassette documents for tools that walk raw entries (the prefix report).

People-facing reading (``dejacache show`` / ``diff``, the HTML report) goes through
:mod:`.trajectory` (``load_cassette`` / ``diff_cassettes``), which this module predates.
"""

from __future__ import annotations

import pathlib
from typing import Any

from ..errors import CassetteError
from . import format as fmt
from .document import load_document, verify_document

__all__ = ["expanded_entries", "load", "problem"]


def load(path: str | pathlib.Path) -> dict[str, Any]:
    """The parsed document, not checked: showing a damaged or hand-edited file is how one
    finds what changed (:func:`problem` says whether it checks out)."""
    p = pathlib.Path(path)
    data = fmt.read_file(p)
    if data is None:
        raise CassetteError("no such file", path=p)
    return load_document(data, p, verify=False)


def problem(doc: dict[str, Any], path: str | pathlib.Path) -> str | None:
    """Why ``doc`` would be refused on replay (a checksum or hash mismatch), or None."""
    try:
        verify_document(doc, path)
    except CassetteError as exc:
        return str(exc)
    return None


def expanded_entries(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Entries with every value reference replaced by the value itself."""
    values = doc.get("values", {})

    def resolve(h: str) -> Any:
        return values.get(h, fmt.REF + h)

    out = []
    for e in doc["entries"]:  # (a reference missing from a damaged file stays as it is)
        d = dict(e)
        for field in ("request", "response"):
            if field in d:
                d[field] = fmt.unpack(d[field], resolve)
        out.append(d)
    return out
