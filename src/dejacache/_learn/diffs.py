"""Where two recorded requests of the same call differ: field by field, and inside strings
span by span (pure functions over the stored JSON trees).

A difference is one of

* ``span``: inside a string, every differing place fits a volatile shape (``spans``);
* ``field``: the whole value differs (a number, or a string that is one shape, or two
  strings with nothing in common): a candidate for a path rule;
* ``text``: a string differs in ordinary words (``Paris`` / ``Rome``): not volatile;
* ``structure``: a key present on one side only, lists of different lengths: not volatile;
* ``order``: a list holding the same items in another order (a set's iteration order
  changes from run to run with string hashing): not volatile, and never masked item by item
  (``tags[*]`` would give every list of tags one key);
* ``credential``: under a credential's name, a masked secret, or the caller's identity:
  never masked by a rule, whatever it looks like. A string holding the same masked secrets
  on both sides and differing only away from them (a timestamp beside a redacted key) is
  told apart by what differs there, as any other string;
* ``quoted``: a value each run took from its own earlier answers (``echo.py``; set by
  ``recordings.py``, which knows the answers): what the model chose, never masked.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any, Final

import orjson

from .._core.shapes import Shape, Span, shape_of, spans
from .._core.volatile import Path
from .._secrets import MASK_PREFIX, is_secret_name

__all__ = ["Difference", "at", "differences", "generalised", "path_text", "shape_of_value"]

SPAN: Final = "span"
FIELD: Final = "field"
TEXT: Final = "text"
STRUCTURE: Final = "structure"
ORDER: Final = "order"
CREDENTIAL: Final = "credential"
QUOTED: Final = "quoted"

_REDACTED: Final = "<REDACTED>"
# Top-level members that say who asks, never what: an HTTP request's credentials, and which
# WebSocket session a message is in (``<handshake key>#<n>``: a rule masking the number let
# two sessions with one handshake answer each other's messages).
_IDENTITY: Final = frozenset({"identity", "ws_session"})
# A credential inside a string as keys and files hold it: a key mask (its hex, or the
# placeholder a file writes for it), or the placeholder alone.
_MASKED: Final = re.compile(re.escape(MASK_PREFIX) + r"(?:[0-9a-f]+>|" + re.escape(_REDACTED)
                            + r")?|" + re.escape(_REDACTED))


@dataclasses.dataclass(frozen=True, slots=True)
class Difference:
    """One place two requests differ (``a``: the first run's value, ``b``: the other's)."""

    kind: str
    path: Path
    a: Any
    b: Any
    spans: tuple[Span, ...] = ()
    shape: Shape | None = None  #: a ``field``'s shape, when the whole value is one

    @property
    def where(self) -> str:
        return path_text(self.path)


def path_text(path: Path) -> str:
    """``("body", "messages", 0, "content")`` -> ``body.messages[0].content``."""
    out = ""
    for step in path:
        if isinstance(step, int):
            out += f"[{step}]"
        elif step is None:
            out += "[*]"
        else:
            out += f".{step}" if out else str(step)
    return out


MISSING: Final = object()


def at(tree: Any, path: Path) -> Any:
    """The value at ``path`` in ``tree`` (:data:`MISSING`: none there)."""
    for step in path:
        if type(tree) is dict and isinstance(step, str):
            tree = tree.get(step, MISSING)
        elif type(tree) is list and isinstance(step, int) and step < len(tree):
            tree = tree[step]
        else:
            return MISSING
    return tree


def generalised(path: Path) -> Path:
    """List positions as ``[*]``: the same field in every message or item."""
    return tuple(None if isinstance(s, int) else s for s in path)


def _named_credential(path: Path) -> bool:
    return bool(path) and (path[0] in _IDENTITY
                           or any(isinstance(s, str) and is_secret_name(s) for s in path))


def _credential(path: Path, a: Any, b: Any) -> bool:
    if _named_credential(path):
        return True
    return any(isinstance(v, str) and (MASK_PREFIX in v or _REDACTED in v) for v in (a, b))


def _beside_credentials(path: Path, a: Any, b: Any) -> Difference | None:
    """How two strings holding the same masked credentials differ away from them (a
    timestamp beside a redacted key is a timestamp's difference), or None: the credentials
    differ, or a difference touches one. A weak shape is written with the literal text
    beside it (``rule_for``), so it may not lean on a credential either: a rule anchored on
    a file's placeholder would never match a live key's mask."""
    if type(a) is not str or type(b) is not str or _named_credential(path):
        return None
    in_a, in_b = list(_MASKED.finditer(a)), list(_MASKED.finditer(b))
    if [m.group() for m in in_a] != [m.group() for m in in_b]:
        return None
    found = _string(path, a, b)
    for span in found.spans:
        lean = 0 if span.shape is not None and span.shape.strong else 1
        for (start, end), masks in ((span.a, in_a), (span.b, in_b)):
            lo, hi = start - lean * len(span.before), end + lean * len(span.after)
            if any(m.start() < hi and lo < m.end() for m in masks):
                return None
    return found


def shape_of_value(value: Any) -> str:
    """A name for a whole differing non-string value (``epoch``, ``number``...)."""
    if isinstance(value, bool) or value is None:
        return "flag"
    if isinstance(value, int) and 10 <= len(str(abs(value))) <= 19 and str(value)[0] == "1":
        return "epoch"
    if isinstance(value, float) and 1e9 <= value < 2e9:
        return "epoch"
    if isinstance(value, (int, float)):
        return "number"
    return "value"


def _epoch(a: Any, b: Any) -> Shape | None:
    """The epoch shape when two numbers both read as Unix times (s, ms, µs or ns)."""
    if shape_of_value(a) == shape_of_value(b) == "epoch":
        return shape_of("epoch")
    return None


def _string(path: Path, a: str, b: str) -> Difference:
    found = spans(a, b)
    whole = len(found) == 1 and found[0].a == (0, len(a)) and found[0].b == (0, len(b))
    if whole:
        return Difference(FIELD, path, a, b, tuple(found), found[0].shape)
    if all(s.shape is not None for s in found):
        return Difference(SPAN, path, a, b, tuple(found))
    return Difference(TEXT, path, a, b, tuple(found))


def _walk(a: Any, b: Any, path: Path) -> Iterator[Difference]:
    if type(a) is dict and type(b) is dict:
        for k in a.keys() | b.keys():
            if k not in a or k not in b:
                p = (*path, k)
                yield Difference(CREDENTIAL if _credential(p, a.get(k), b.get(k))
                                 else STRUCTURE, p, a.get(k), b.get(k))
            elif a[k] != b[k]:
                yield from _walk(a[k], b[k], (*path, k))
        return
    if type(a) is list and type(b) is list:
        if len(a) != len(b):
            yield Difference(STRUCTURE, path, len(a), len(b))
            return
        if _reordered(a, b):
            yield Difference(ORDER, path, a, b)
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                yield from _walk(x, y, (*path, i))
        return
    if a == b and type(a) is type(b):
        return
    if _credential(path, a, b):
        yield _beside_credentials(path, a, b) or Difference(CREDENTIAL, path, a, b)
    elif type(a) is str and type(b) is str:
        yield _string(path, a, b)
    elif type(a) is not type(b) and not (isinstance(a, (int, float))
                                         and isinstance(b, (int, float))):
        yield Difference(STRUCTURE, path, a, b)
    else:
        yield Difference(FIELD, path, a, b, shape=_epoch(a, b))


def _reordered(a: list[Any], b: list[Any]) -> bool:
    """Whether two differing lists of one length hold the same items in another order."""
    def items(v: list[Any]) -> list[bytes]:
        return sorted(orjson.dumps(x, option=orjson.OPT_SORT_KEYS) for x in v)

    try:
        return items(a) == items(b)
    except TypeError:  # not JSON (a stored request always is)
        return False


def differences(a: Any, b: Any) -> list[Difference]:
    """Every place the request trees ``a`` and ``b`` differ, in a stable order."""
    return sorted(_walk(a, b, ()), key=lambda d: path_text(d.path))
