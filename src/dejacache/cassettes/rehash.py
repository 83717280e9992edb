"""``dejacache rehash``: a hand-edited cassette made valid again (values renamed by their
content, entries checksummed). A maintenance command: no block loads it.
"""

from __future__ import annotations

from typing import Any

from ..errors import CassetteError
from .document import describe, load_document
from .format import BLOB_REF, REF, Buffer, value_hash
from .render import entry_checksum, render

__all__ = ["rehash"]

def rehash(data: Buffer, path: Any) -> tuple[bytes, list[str]]:
    """A hand-edited cassette made valid again: each shared value renamed by the hash of
    its content (references to it follow), then every entry checksummed. Returns the new
    bytes and the entries whose content changed (empty when only the format was upgraded).
    Keys are kept: an edited request still answers the call recorded under its key."""
    doc = load_document(data, path, verify=False)
    values = doc["values"]
    renamed: dict[str, str] = {}
    fresh: dict[str, Any] = {}
    busy: set[str] = set()

    def rename(h: str) -> str:
        # Linear: values are renamed bottom-up, never expanded (an agent's requests repeat
        # their history, so expanding them all is quadratic: 12 s for a 10k-call file).
        if h in renamed:
            return renamed[h]
        if h not in values:
            raise CassetteError(f"cannot rehash: dangling value reference {REF}{h}", path=path)
        if h in busy:
            raise CassetteError(f"cannot rehash: value {REF}{h} refers to itself", path=path)
        busy.add(h)
        v = values[h]
        v = v if type(v) is str else relink(v)  # a top-level string value is literal
        busy.discard(h)
        renamed[h] = new = value_hash(v)
        fresh[new] = v
        return new

    def relink(tree: Any) -> Any:
        t = type(tree)
        if t is str:
            if tree.startswith(REF) and not tree.startswith(BLOB_REF):
                return REF + rename(tree[len(REF):])
            return tree
        if t is dict:
            return {k: relink(v) for k, v in tree.items()}
        if t is list:
            return [relink(v) for v in tree]
        return tree

    entries, changed = [], []
    for i, e in enumerate(doc["entries"]):
        d = dict(e)
        for field in ("request", "response"):  # the only packed fields
            if field in d:
                d[field] = relink(d[field])
        entries.append(d)
        # (a value edited below an entry renamed its references, so its bytes changed too;
        # format 1 had no checksums to tell)
        if "checksum" in e and e["checksum"] != entry_checksum(d):
            changed.append(describe(i, e))
    return render(entries, fresh), changed
