"""Items added to an array of ``[tool.dejacache]`` in pyproject.toml, the rest of the file
kept byte for byte (comments, order, spacing, the other tables).

Python reads TOML (``tomllib``) but does not write it, and a writer that re-renders the
document loses the user's comments and layout. This editor finds the table's header line,
then the key's array (reading strings and comments, so a ``]`` inside a pattern is not the
end), and inserts the new items before its closing bracket, in the array's own layout: one
per line in a multi-line array, comma separated in a one-line one. No table: one is added at
the end of the file; no key: it is added after the table's last line. The result is parsed
again and must equal the old document with the items added, or nothing is written.
Items are written as literal strings (``'re:\\d{4}'``: no escapes to read) unless they
hold a quote or a control character.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from .errors import ConfigurationError

__all__ = ["add_items", "toml_string"]

_HEADER: Final = re.compile(r"^[ \t]*\[[ \t]*tool[ \t]*\.[ \t]*dejacache[ \t]*\][ \t]*(?:#.*)?$",
                            re.M)
_ANY_HEADER: Final = re.compile(r"^[ \t]*\[", re.M)


def toml_string(value: str) -> str:
    """``value`` as a TOML string: literal when it can be, else basic with escapes."""
    if "'" not in value and not any(ord(c) < 32 or ord(c) == 127 for c in value):
        return f"'{value}'"
    out = []
    for c in value:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 32 or ord(c) == 127:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _skip_string(text: str, i: int) -> int:
    """The index just past the TOML string starting at ``text[i]``."""
    for quote in ('"""', "'''"):
        if text.startswith(quote, i):
            end = text.find(quote, i + 3)
            while quote == '"""' and end > 0 and _escaped(text, end):
                end = text.find(quote, end + 1)
            if end < 0:
                raise ValueError("unterminated string")
            while text.startswith(quote[0], end + 3):  # up to two quotes end the content
                end += 1
            return end + 3
    q = text[i]
    j = i + 1
    while j < len(text) and text[j] != q and text[j] != "\n":
        j += 2 if q == '"' and text[j] == "\\" else 1
    if j >= len(text) or text[j] != q:
        raise ValueError("unterminated string")
    return j + 1


def _escaped(text: str, at: int) -> bool:
    n = 0
    while at - 1 - n >= 0 and text[at - 1 - n] == "\\":
        n += 1
    return n % 2 == 1


def _array_end(text: str, start: int) -> tuple[int, int, bool]:
    """For the array whose ``[`` is at ``start``: the index of its ``]``, the index just
    past its last item (where a comma would go), and whether a comma already follows it."""
    depth, i = 0, start
    last, comma = start + 1, True  # an empty array needs no comma
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = _skip_string(text, i)
            if depth == 1:
                last, comma = i, False
            continue
        if c == "#":
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
            continue
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i, last, comma
            if depth == 1:
                last, comma = i + 1, False
        elif depth == 1 and c == ",":
            comma = True
        elif depth == 1 and not c.isspace():
            last, comma = i + 1, False
        i += 1
    raise ValueError("unterminated array")


def _table_span(text: str) -> tuple[int, int] | None:
    """Where ``[tool.dejacache]``'s body starts and ends (the next table header)."""
    m = _HEADER.search(text)
    if m is None:
        return None
    body = text.find("\n", m.end())
    body = len(text) if body < 0 else body + 1
    nxt = _ANY_HEADER.search(text, body)
    return body, nxt.start() if nxt is not None else len(text)


def _key_value(text: str, lo: int, hi: int, key: str) -> int | None:
    """Where the value of ``key = ...`` starts inside the table body ``text[lo:hi]``."""
    pat = re.compile(rf"^[ \t]*(?:{re.escape(key)}|\"{re.escape(key)}\"|'{re.escape(key)}')"
                     r"[ \t]*=[ \t]*", re.M)
    m = pat.search(text, lo, hi)
    return None if m is None else m.end()


def _insert_items(text: str, at: int, items: Sequence[str]) -> str:
    close, last, comma = _array_end(text, at)
    inside = text[at:close]
    if "\n" in inside:  # one item per line, indented like the first
        m = re.search(r"\n([ \t]+)\S", inside)
        indent = m.group(1) if m else "    "
        lines = "".join(f"{indent}{toml_string(v)},\n" for v in items)
        line_start = text.rfind("\n", 0, close) + 1
        mark = "" if comma else ","
        if line_start <= last:  # "]" shares a line with the last item
            return text[:last] + mark + "\n" + lines + text[last:]
        return text[:last] + mark + text[last:line_start] + lines + text[line_start:]
    sep = "" if comma and text[last - 1] == "[" else ", " if not comma else " "
    added = ", ".join(toml_string(v) for v in items)
    return text[:last] + sep + added + text[last:close] + text[close:]


def _after_last_line(text: str, lo: int, hi: int) -> int:
    """Just past the table body's last line that is neither blank nor a comment (comments
    before the next table usually introduce that table)."""
    lines = text[lo:hi].splitlines(keepends=True)
    pos, end = lo, lo
    for line in lines:
        pos += len(line)
        if line.strip() and not line.lstrip().startswith("#"):
            end = pos
    return end


def _new_key(key: str, items: Sequence[str]) -> str:
    return f"{key} = [\n" + "".join(f"    {toml_string(v)},\n" for v in items) + "]\n"


def _edit(text: str, key: str, items: Sequence[str]) -> str:
    span = _table_span(text)
    if span is None:
        sep = "" if not text else "\n" if text.endswith("\n") else "\n\n"
        return text + sep + "[tool.dejacache]\n" + _new_key(key, items)
    lo, hi = span
    at = _key_value(text, lo, hi, key)
    if at is None:
        end = _after_last_line(text, lo, hi)
        prefix = text[:end] if text[:end].endswith("\n") or end == 0 else text[:end] + "\n"
        return prefix + _new_key(key, items) + text[end:]
    if text[at:at + 1] != "[":
        raise ValueError(f"{key} is not an array")
    return _insert_items(text, at, items)


def _table(doc: dict[str, Any]) -> dict[str, Any]:
    tool = doc.get("tool")
    table = tool.get("dejacache") if isinstance(tool, dict) else None
    return table if isinstance(table, dict) else {}


def add_items(text: str, key: str, items: Sequence[str], *, where: str = "pyproject.toml"
              ) -> tuple[str, list[str]]:
    """``text`` with ``items`` appended to ``[tool.dejacache] key`` (those not there yet),
    and the items added. A file this editor cannot change safely is a
    ``ConfigurationError`` that shows the lines to add by hand."""
    import tomllib

    try:
        old = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{where} is not valid TOML: {exc}") from None
    present = _table(old).get(key, [])
    new_items = [v for v in dict.fromkeys(items) if v not in present]
    if not new_items:
        return text, []
    by_hand = (f"add them by hand under [tool.dejacache]:\n{_new_key(key, new_items)}")
    if "dejacache" in old.get("tool", {}) and _table_span(text) is None:
        raise ConfigurationError(f"{where}: [tool.dejacache] is not written as a table "
                                 f"header, which this editor needs; {by_hand}")
    try:
        out = _edit(text, key, new_items)
        doc = tomllib.loads(out)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"{where}: cannot add to [tool.dejacache] {key} ({exc}); "
                                 f"{by_hand}") from None
    expect = {**_table(old), key: [*present, *new_items]}
    rest_old = {k: v for k, v in old.items() if k != "tool"}
    rest_new = {k: v for k, v in doc.items() if k != "tool"}
    tools_old = {k: v for k, v in old.get("tool", {}).items() if k != "dejacache"}
    tools_new = {k: v for k, v in doc.get("tool", {}).items() if k != "dejacache"}
    if _table(doc) != expect or rest_old != rest_new or tools_old != tools_new:
        raise ConfigurationError(f"{where}: adding to [tool.dejacache] {key} would change "
                                 f"more than that key; {by_hand}")
    return out, new_items
