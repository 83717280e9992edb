"""Cassettes keyed again under new volatile rules, so they replay without being re-recorded.

A recording's key is the digest of its stored canonical request. With a new rule, the
same call keys as the request with the rule applied: each entry's request is masked
(``masking.py``), its key recomputed and the masked request stored in its place (a later
miss then shows ``<volatile>`` where the rule matched, as a fresh recording would).
Entries that newly share a key keep their file order as occurrences, as recordings do.

Only an entry whose stored request gives back its own key is re-keyed: one recorded with
credentials the file masks, or with ``substitute=`` placeholders, cannot be keyed from what
the file holds, and is left as it was (and counted). A file that is not a dejacache
cassette, or fails its checksums, is not touched.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from ..cassettes import format as fmt
from ..cassettes.atomic import atomic_write
from ..cassettes.document import load_document
from ..cassettes.lock import cassette_lock
from ..cassettes.pack import Packer
from ..cassettes.render import render
from ..errors import CassetteError
from ..keys import canonical_json, digest, volatile_spellings
from .answers import answer_of, first_merge
from .masking import Rules, masked

__all__ = ["Rekeyed", "cassette_files", "rekey_file", "rekey_files"]

# Directories that hold no cassettes of the project (environments, caches, VCS).
_SKIP = frozenset({"node_modules", "__pycache__", "site-packages", "build", "dist"})


@dataclasses.dataclass(slots=True)
class Rekeyed:
    path: pathlib.Path
    changed: int = 0  #: entries with a new key
    kept: int = 0  #: entries whose stored request cannot give back their key
    problem: str | None = None  #: why the file was not read


def cassette_files(roots: Iterable[pathlib.Path]) -> Iterator[pathlib.Path]:
    """``*.json`` files in a ``cassettes`` directory under ``roots`` (hidden directories,
    virtual environments and caches skipped), and files named directly."""
    import os

    seen: set[pathlib.Path] = set()
    for root in roots:
        if root.is_file():
            if root not in seen:
                seen.add(root)
                yield root
            continue
        for here, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP
                             and not (pathlib.Path(here, d) / "pyvenv.cfg").exists())
            rel = pathlib.Path(here).relative_to(root).parts
            if "cassettes" not in rel and root.name != "cassettes":
                continue
            for f in sorted(files):
                p = pathlib.Path(here, f)
                if f.endswith(".json") and p not in seen:
                    seen.add(p)
                    yield p


def _entry(e: dict[str, Any], values: dict[str, Any], rules: Rules) -> dict[str, Any] | None:
    """``e`` keyed under ``rules``; ``e`` itself when nothing changes; None when its key
    cannot be recomputed from what the file holds."""
    req = fmt.unpack(e.get("request"), values.get)
    if not isinstance(req, dict):
        return None
    ns, name = str(e.get("namespace", "")), str(e.get("name", ""))
    if digest(ns, name, canonical_json(req)) != e.get("key"):
        return None
    new = masked(req, str(e.get("kind", "")), rules)
    canonical = canonical_json(new, volatile=volatile_spellings(rules.names))
    key = digest(ns, name, canonical)
    if key == e.get("key"):
        return e
    out = dict(e)
    out["key"] = key
    out["request"] = Packer(values).pack_root(orjson.loads(canonical))
    return out


def rekey_file(path: pathlib.Path, rules: Rules) -> Rekeyed:
    """Key ``path``'s entries again under ``rules`` (written only when a key changed; not
    at all when the rules would give two calls answered differently one key)."""
    result = Rekeyed(path)
    try:
        with cassette_lock(path):
            # An append killed midway is rolled back here, under the lock: reading the file
            # with its undo record there would take the lock again, held by this very call.
            fmt.recover_locked(path)
            data = fmt.read_file(path)
            if data is None:
                raise CassetteError("no such file", path=path)
            doc = load_document(fmt.whole(data), path)
            values: dict[str, Any] = doc["values"]
            entries = []
            for e in doc["entries"]:
                new = _entry(e, values, rules)
                if new is None:
                    result.kept += 1
                    new = e
                elif new is not e:
                    result.changed += 1
                entries.append(new)
            if result.changed:
                _refuse_merges(doc["entries"], entries, values, path)
                atomic_write(path, render(entries, values))
    except CassetteError as exc:
        result.problem = str(exc)
        result.changed = 0
    return result


def _refuse_merges(before: list[dict[str, Any]], after: list[dict[str, Any]],
                   values: dict[str, Any], path: pathlib.Path) -> None:
    """A cassette whose rekeyed entries would merge calls answered differently is left as
    it was: replayed in another order, or alone, one would get the other's answer (the rule
    is wrong for this suite, or the calls must be re-recorded under it)."""
    def calls() -> Iterator[tuple[str, str, bytes, int]]:
        for i, (old, new) in enumerate(zip(before, after, strict=True)):
            err = old.get("error")
            response = None if "error" in old else fmt.unpack(old.get("response"), values.get)
            _, answer = answer_of(response, err if isinstance(err, dict) else None)
            yield str(new.get("key")), str(old.get("key")), answer, i

    found = first_merge(calls())
    if found is not None:
        a, b = found
        raise CassetteError(f"the rules would give entries #{a} and #{b} one key, and they "
                            "were answered differently: narrow the rule, or re-record them "
                            "under it", path=path)


def rekey_files(paths: Iterable[pathlib.Path], rules: Rules) -> list[Rekeyed]:
    return [rekey_file(p, rules) for p in paths]
