"""Packing a recording's trees for the file: every large value moved once into the shared
``values`` section under a hash of its content, and which values the entries reference
(the layout and why it is packed: format.py).

Apart from format.py because only a recording, a save and a whole parse pack or walk the
references: a replay hit reads its entry through the byte index (``reader.py``) and never
loads this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from ..errors import CassetteError
from .format import BLOB_REF, REF, strings_in, value_hash

__all__ = ["MIN_SHARED", "MIN_SHARED_RESPONSE", "Packer", "iter_strings", "reachable",
           "refs_in"]

MIN_SHARED: Final = 256
# A reference line costs ~40 bytes indented; a chat message of ~100 bytes or more costs several
# indented lines inline, and repeats in every later request of the run.
MIN_SHARED_DICT: Final = 96
MIN_SHARED_RESPONSE: Final = 4096
_MAX_REFS_SHARED = 4


class Packer:
    """Moves large values of trees into a shared ``values`` mapping (content-addressed).

    What a re-record changes stays in its entry (a reviewer's git diff): a request's root and
    the dicts right under it (an HTTP request's ``body``) are never shared whole, and with
    ``own_last_turn`` neither is the last message of a conversation (a list of dicts with a
    ``role``), the turn a changed prompt changes. Shared whole, either was renamed by any
    change inside it and moved elsewhere in the sorted ``values``: a 3-call re-record with one
    prompt changed was a 122-line diff in 9 hunks. The next request repeats that message,
    not the last any more, and shares it then; unchanged values keep their names, so an
    entry's diff is the lines its call changed (``test_cassette_diff.py`` pins the bound).
    """

    def __init__(self, values: dict[str, Any], *, min_shared: int = 0,
                 share_containers: bool = True, blobs: Any = None,
                 own_last_turn: bool = False) -> None:
        self.values = values
        self.min_shared = min_shared or MIN_SHARED
        self.containers = share_containers
        self.min_dict = min(MIN_SHARED_DICT, self.min_shared)
        # ``blobs``: a ``blobs.Sink`` taking the payloads out of the tree (None: none)
        self.blobs = blobs
        self.min_blob = blobs.min_payload + 2 if blobs is not None else 1 << 62
        self.own_last_turn = own_last_turn

    def _share(self, node: Any) -> str:
        h = value_hash(node)
        self.values.setdefault(h, node)
        return REF + h

    def pack(self, tree: Any) -> Any:
        """A copy of ``tree`` with large parts replaced by references (the root stays)."""
        return self._walk(tree, True)[0]

    def _walk(self, node: Any, share: bool) -> tuple[Any, int, int]:
        # -> (packed node, approximate JSON size of the *original* node, references inside the
        # packed node). Size is taken before packing, so a message is shared as a whole even
        # after its long content became a reference. A container holding many references
        # (a request body listing its messages) is structure that will not repeat: it stays
        # inline so the file reads as a list of message references. ``share`` False: nothing
        # under ``node`` is shared but a string that looks like a reference (never ambiguous).
        t = type(node)
        if t is str:
            n = len(node) + 2
            if n >= self.min_blob:
                mark = self.blobs.take(node)
                if mark is not None:  # sized as stored: a message around it stays inline
                    return mark, len(mark) + 2, 0
            if (share and n >= self.min_shared) or node.startswith(REF):
                return self._share(node), n, 1
            return node, n, 0
        if t is dict:
            out: dict[str, Any] = {}
            size, refs = 2, 0
            for k, v in node.items():
                pv, sv, rv = self._walk(v, share)
                out[k] = pv
                size += len(k) + 4 + sv
                refs += rv
            if share and self.containers and size >= self.min_dict and refs <= _MAX_REFS_SHARED:
                return self._share(out), size, 1
            return out, size, refs
        if t is list:
            items = []
            size, refs = 2, 0
            numbers = True
            own = (self.own_last_turn and share and node and type(node[-1]) is dict
                   and any(type(v) is dict and "role" in v for v in node))
            last = len(node) - 1
            for i, v in enumerate(node):
                tv = type(v)
                if tv is dict or tv is list or tv is str:
                    numbers = False
                pv, sv, rv = self._walk(v, share and not (own and i == last))
                items.append(pv)
                size += sv + 1
                refs += rv
            if share and numbers and self.containers and size >= self.min_shared:
                return self._share(items), size, 1  # embeddings, ids
            return items, size, refs
        return node, 8, 0

    def pack_root(self, tree: Any) -> Any:
        """Like :meth:`pack` but the root keeps its own fields inline, and so does each dict
        right under it (see the class docstring)."""
        if type(tree) is dict:
            return {k: ({f: self.pack(x) for f, x in v.items()} if type(v) is dict
                        else self.pack(v)) for k, v in tree.items()}
        if type(tree) is list:
            return [self.pack(v) for v in tree]
        return self.pack(tree)


def refs_in(tree: Any, out: set[str]) -> None:
    """Collect the hashes referenced directly by ``tree``."""
    strings_in(tree, _value_ref, out)


def _value_ref(s: str) -> str | None:
    return s[len(REF):] if s.startswith(REF) and not s.startswith(BLOB_REF) else None


def reachable(entries: list[dict[str, Any]], values: dict[str, Any], *,
              strict: bool = True) -> dict[str, Any]:
    """The part of ``values`` that the entries reference (directly or through values); a
    reference to a missing value raises unless ``strict`` is false."""
    todo: set[str] = set()
    for e in entries:
        refs_in(e.get("request"), todo)
        refs_in(e.get("response"), todo)
    seen: dict[str, Any] = {}
    while todo:
        h = todo.pop()
        if h in seen:
            continue
        if h not in values:
            if not strict:
                continue
            raise CassetteError(f"dangling value reference {REF}{h}")
        v = values[h]
        seen[h] = v
        if type(v) is not str:
            refs_in(v, todo)
    return seen


def iter_strings(tree: Any) -> Iterator[str]:
    t = type(tree)
    if t is str:
        yield tree
    elif t is dict:
        for k, v in tree.items():
            yield k
            yield from iter_strings(v)
    elif t is list:
        for v in tree:
            yield from iter_strings(v)
