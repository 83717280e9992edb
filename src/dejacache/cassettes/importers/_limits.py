"""How much work one imported file may ask for, and the checks that hold it to that.

A recording to import is untrusted input: a 1.2 KB YAML file of nested aliases stands for a
document of a billion nodes, and a 340 KB gzip body inflates to 340 MB. Every step of an import
is linear in the *expanded* document and the *inflated* bodies, so bounding those two bounds
the whole import's time and memory. Past a bound the file is refused with ``CassetteError``
saying which bound and by how much, before anything is written.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar

from ...errors import CassetteError

__all__ = [
    "EXPANSION_FLOOR",
    "EXPANSION_RATIO",
    "INFLATE_CAP",
    "INFLATE_FLOOR",
    "INFLATE_RATIO",
    "MAX_DEPTH",
    "InflateBudget",
    "OverBudget",
    "check_expansion",
]

# A vcrpy interaction is six levels deep; a JSON body kept as a mapping adds its own (the
# deepest tool schema in the SDK test suites we read is under 20). 200 leaves ten times that,
# stays under orjson's 255-level limit on the bodies, and keeps every recursive walk after the
# load (PyYAML's constructor, key canonicalisation) far from Python's 1,000-frame limit: a
# 1,000-deep JSON argument raised RecursionError out of the agentcassette import.
MAX_DEPTH: Final = 200

# The expanded document counts one per node plus the characters of each scalar. Without
# aliases that is at most about twice the file's bytes (every node and scalar character
# takes at least one byte of source); the aliases PyYAML's dumper writes for an object met
# twice add little. Eight times the file leaves room for those; the floor lets a small file
# use aliases freely. Nine nested aliases of nine "lol"s (800 bytes) expand to 9**9 nodes.
EXPANSION_RATIO: Final = 8
EXPANSION_FLOOR: Final = 1 << 20

# Inflated body bytes, summed over the file. A streamed chat completion (800 SSE chunks that
# repeat the same envelope) gzips 40 to 1, the most we measured; JSON answers 2 to 5. A
# hundred times the file leaves room over that; the floor keeps small files unconstrained; the
# cap holds memory (the cassette keeps every body until it is written) to what no test
# recording needs. The 340 KB bomb that inflated to 340 MB stops after 64 MiB.
INFLATE_RATIO: Final = 100
INFLATE_FLOOR: Final = 64 << 20
INFLATE_CAP: Final = 256 << 20

T = TypeVar("T")


class OverBudget(Exception):
    """A body inflates past what its file may: the caller names the file and interaction."""


class InflateBudget:
    """The inflated bytes a file's bodies may add up to, taken as they are produced."""

    __slots__ = ("left", "limit")

    def __init__(self, source_size: int) -> None:
        self.limit = min(INFLATE_CAP, max(INFLATE_FLOOR, INFLATE_RATIO * source_size))
        self.left = self.limit

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise OverBudget(
                f"its compressed bodies inflate past {self.limit:,} bytes (the limit for a "
                f"file of this size: {INFLATE_RATIO} times its size, at least "
                f"{INFLATE_FLOOR:,} and at most {INFLATE_CAP:,} bytes)")


def check_expansion(root: T, children: Callable[[T], Sequence[T] | None],
                    weight: Callable[[T], int], source_size: int, path: pathlib.Path) -> None:
    """Refuse ``root`` if, with every shared node counted each time it is reached, it holds
    more than its share of nodes and characters, nests deeper than ``MAX_DEPTH``, or reaches
    itself. ``children`` gives a container's children and ``None`` for a leaf, whose size is
    ``weight``. Each container is visited once (the sizes of shared ones are remembered, not
    those of leaves: they are most of a document), without recursion."""
    limit = max(EXPANSION_FLOOR, EXPANSION_RATIO * source_size)
    size: dict[int, int] = {}  # containers done: expanded size and depth
    depth: dict[int, int] = {}
    open_: set[int] = set()  # the containers on the path from the root: meeting one is a loop
    stack: list[tuple[Any, Sequence[Any] | None]] = [(root, None)]
    while stack:
        node, kids = stack.pop()
        if kids is not None:  # every child is done: so is this container
            key = id(node)
            open_.discard(key)
            total, deepest = 1, 1
            for k in kids:  # a child not in ``size`` is a leaf (containers finish first)
                done = id(k) in size
                total += size[id(k)] if done else weight(k)
                deepest = max(deepest, depth[id(k)] + 1 if done else 2)
            if total > limit:
                raise CassetteError(
                    f"not a readable cassette: its aliases expand it past {limit:,} nodes and "
                    f"characters ({EXPANSION_RATIO} times its size, at least "
                    f"{EXPANSION_FLOOR:,})", path=path)
            if deepest > MAX_DEPTH:
                raise CassetteError(f"not a readable cassette: nested deeper than {MAX_DEPTH} "
                                    "levels", path=path)
            size[key], depth[key] = total, deepest
            continue
        if id(node) in size:
            continue
        own = children(node)
        if own is None:
            continue
        if id(node) in open_:
            raise CassetteError("not a readable cassette: an alias refers to itself (a node "
                                "that contains itself)", path=path)
        open_.add(id(node))
        stack.append((node, own))
        stack.extend((k, None) for k in own)
