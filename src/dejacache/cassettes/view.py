"""Reading whole cassettes for people: expanded entries (``show``) and drift reports (``diff``)."""

from __future__ import annotations

import collections
import dataclasses
import pathlib
from typing import Any

from .._core.diff import field_diff
from ..errors import CassetteError
from ..stats import token_total
from . import format as fmt

__all__ = ["Drift", "drift", "expanded_entries", "load", "problem"]


def load(path: str | pathlib.Path) -> dict[str, Any]:
    """The parsed document, not checked: showing a damaged or hand-edited file is how one
    finds what changed (:func:`problem` says whether it checks out)."""
    p = pathlib.Path(path)
    data = fmt.read_file(p)
    if data is None:
        raise CassetteError("no such file", path=p)
    return fmt.load_document(data, p, verify=False)


def problem(doc: dict[str, Any], path: str | pathlib.Path) -> str | None:
    """Why ``doc`` would be refused on replay (a checksum or hash mismatch), or None."""
    try:
        fmt.verify_document(doc, path)
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


def _tokens(e: dict[str, Any]) -> int:
    u = e.get("usage")
    return token_total(u) if isinstance(u, dict) else 0


@dataclasses.dataclass
class Drift:
    added: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    dropped: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    changed: list[tuple[dict[str, Any], dict[str, Any], list[str]]] = dataclasses.field(
        default_factory=list)
    same: int = 0
    tokens: tuple[int, int] = (0, 0)
    seconds: tuple[float, float] = (0.0, 0.0)


def drift(a: dict[str, Any], b: dict[str, Any]) -> Drift:
    """Align the i-th call of each name in A with the i-th in B and compare them."""
    ea, eb = expanded_entries(a), expanded_entries(b)
    by_a: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    by_b: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for e in ea:
        by_a[str(e.get("name"))].append(e)
    for e in eb:
        by_b[str(e.get("name"))].append(e)
    out = Drift(tokens=(sum(map(_tokens, ea)), sum(map(_tokens, eb))),
                seconds=(sum(float(e.get("duration", 0)) for e in ea),
                         sum(float(e.get("duration", 0)) for e in eb)))
    for name in sorted(set(by_a) | set(by_b)):
        la, lb = by_a.get(name, []), by_b.get(name, [])
        for i in range(max(len(la), len(lb))):
            if i >= len(lb):
                out.dropped.append(la[i])
            elif i >= len(la):
                out.added.append(lb[i])
            else:
                old, new = la[i], lb[i]
                lines = [f"request.{d}" for d in field_diff(old.get("request"),
                                                            new.get("request"))]
                lines += [f"response.{d}" for d in field_diff(old.get("response"),
                                                              new.get("response"))]
                lines += [f"error.{d}" for d in field_diff(old.get("error"), new.get("error"))]
                if lines:
                    out.changed.append((old, new, lines))
                else:
                    out.same += 1
    return out
