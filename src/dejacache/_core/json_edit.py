"""Add members to objects inside a JSON document without re-serialising it.

A request rewritten at runtime (a routing key, a cache breakpoint) must reach the provider
with every other byte as the SDK wrote it: the same spacing, escapes and key order, so what the
model reads is provably the same (a test compares the bytes). ``insert`` finds each target
object by its path with one pass of a tokenizer over the document (strings and the structural
characters; numbers and literals are skipped) and splices the new members in before the
object's closing brace.

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

__all__ = ["Path", "insert"]

Path = tuple[str | int, ...]  # member names and list indexes from the top ("" nowhere)

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


def insert(raw: bytes, edits: Sequence[tuple[Path, str, Any]]) -> bytes:
    """``raw`` with ``name: value`` added as the last member of the object at each path
    (``()``: the top level), in the order given. A path that names no object in ``raw`` is
    skipped. ``value`` is written compactly (orjson)."""
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
