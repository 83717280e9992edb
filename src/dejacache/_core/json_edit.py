"""Add and remove members of objects inside a JSON document without re-serialising it.

A request rewritten at runtime (a routing key, a cache breakpoint) must reach the provider
with every other byte as the SDK wrote it: the same spacing, escapes and key order, so what the
model reads is provably the same (a test compares the bytes). ``insert`` finds each target
object by its path with one pass of a tokenizer over the document (strings and the structural
characters; numbers and literals are skipped) and splices the new members in before the
object's closing brace. A member whose value is :data:`DELETE` is removed instead (a cache
breakpoint moved: taken off one block, put on another): its name, value and one separating
comma go, every other byte stays.

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

__all__ = ["DELETE", "Path", "insert"]

Path = tuple[str | int, ...]  # member names and list indexes from the top ("" nowhere)



class _Delete:
    __slots__ = ()

    def __repr__(self) -> str:
        return "DELETE"


#: The value of an edit that removes the member instead of adding it.
DELETE: Any = _Delete()

# A JSON string (escapes included) or one structural character.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\],:]', re.DOTALL)


def _closings(raw: bytes, targets: set[Path]) -> dict[Path, tuple[int, bool]]:
    """For each target object: (offset of its closing brace, whether it has no member)."""
    found: dict[Path, tuple[int, bool]] = {}
    # Per open container: [its path, is an object, current member name or index, has one]
    stack: list[list[Any]] = []
    expect_key = False
    for m in _TOKEN.finditer(raw):
        tok = m.group()
        head = tok[:1]
        if head == b'"':
            if expect_key:
                stack[-1][2] = orjson.loads(tok)
                expect_key = False
            continue
        if head in b"{[":
            path: Path = () if not stack else (*stack[-1][0], stack[-1][2])
            is_object = head == b"{"
            stack.append([path, is_object, "" if is_object else 0, False])
            expect_key = is_object
        elif head in b"}]":
            path, is_object, _, has = stack.pop()
            if is_object and path in targets:
                found[path] = (m.start(), not has)
                if len(found) == len(targets):
                    break
            expect_key = False
        elif head == b",":
            top = stack[-1]
            if top[1]:
                expect_key = True
            else:
                top[2] += 1
        elif head == b":":
            stack[-1][3] = True
    return found


def _members(raw: bytes, targets: set[tuple[Path, str]]) -> list[tuple[int, int]]:
    """(start, end) of the bytes to cut for each target member (``(object path, name)``):
    the member and the comma before it, or after it when it is the object's first."""
    cuts: list[tuple[int, int]] = []
    # Per open container: [path, is object, member name or index, start of the current
    # member (offset of the comma before it, or of its name when first), deleting it]
    stack: list[list[Any]] = []
    expect_key = False
    first = False

    def close(at: int, end_of_object: bool) -> None:
        top = stack[-1]
        if top[4]:
            start, comma_before = top[3]
            # The object's first member: cut up to the next member's name (its comma too).
            cuts.append((start, at + 1 if not comma_before and not end_of_object else at))
            top[4] = False

    for m in _TOKEN.finditer(raw):
        tok = m.group()
        head = tok[:1]
        if head == b'"':
            if expect_key:
                top = stack[-1]
                top[2] = orjson.loads(tok)
                if first:
                    top[3] = (m.start(), False)
                top[4] = (top[0], top[2]) in targets
                expect_key = first = False
            continue
        if head in b"{[":
            path: Path = () if not stack else (*stack[-1][0], stack[-1][2])
            is_object = head == b"{"
            stack.append([path, is_object, "" if is_object else 0, (0, False), False])
            expect_key = first = is_object
        elif head in b"}]":
            if stack[-1][1]:
                close(m.start(), True)
            stack.pop()
            expect_key = first = False
        elif head == b",":
            top = stack[-1]
            if top[1]:
                close(m.start(), False)
                top[3] = (m.start(), True)
                expect_key = True
            else:
                top[2] += 1
    return cuts


def _remove(raw: bytes, targets: set[tuple[Path, str]]) -> bytes:
    out = raw
    for start, end in sorted(_members(raw, targets), reverse=True):
        out = out[:start] + out[end:]
    return out


def insert(raw: bytes, edits: Sequence[tuple[Path, str, Any]]) -> bytes:
    """``raw`` with ``name: value`` added as the last member of the object at each path
    (``()``: the top level), in the order given, or the member removed where ``value`` is
    :data:`DELETE` (removals first). An added member replaces one of the same name (a
    ``"cache_control": null`` the SDK wrote): a second one would make the JSON hold the name
    twice, which parsers read differently. A path that names no object in ``raw`` is
    skipped. ``value`` is written compactly (orjson)."""
    if not edits:
        return raw
    gone = {(p, n) for p, n, v in edits
            if v is DELETE or not n.isascii() or orjson.dumps(n) in raw}
    if gone:
        raw = _remove(raw, gone)
        edits = [e for e in edits if e[2] is not DELETE]
        if not edits:
            return raw
    where = _closings(raw, {p for p, _, _ in edits})
    members: dict[Path, list[bytes]] = {}
    for path, name, value in edits:
        if path in where:
            members.setdefault(path, []).append(orjson.dumps(name) + b":" + orjson.dumps(value))
    out = raw
    for path in sorted(members, key=lambda p: where[p][0], reverse=True):
        at, empty = where[path]
        text = b",".join(members[path])
        out = out[:at] + (text if empty else b"," + text) + out[at:]
    return out
