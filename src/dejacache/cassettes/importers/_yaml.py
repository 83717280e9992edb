"""vcrpy's YAML, read without running code and within the bounds of ``_limits``.

The loader is PyYAML's safe loader (libyaml's when present) plus constructors for the three
Python tags vcrpy writes for request bodies, which build plain values (``str``, ``tuple``,
``bytes``), never the objects the tags name; any other Python tag is refused by the safe
loader. The document is composed into nodes first and measured (``check_expansion``: aliases,
nesting, self-reference) before anything is constructed, so a bomb is refused in time
proportional to its file. A tag that vcrpy would not write (``{state: 5}``) is refused with
the interaction and line it is on.
"""

from __future__ import annotations

import importlib
import pathlib
from typing import Any

from ...errors import CassetteError, ConfigurationError
from ._limits import MAX_DEPTH, check_expansion

__all__ = ["load_yaml"]

_TAG = "tag:yaml.org,2002:python/"
_BYTESIO = _TAG + "object/new:_io.BytesIO"
_ITER = _TAG + "object/apply:builtins.iter"


class _Malformed(Exception):
    """A Python tag whose content vcrpy could not have written; ``mark`` is where it is."""

    def __init__(self, tag: str, why: str, mark: Any) -> None:
        super().__init__(f"malformed !!{tag.removeprefix('tag:yaml.org,2002:')}: {why}")
        self.mark = mark


def _yaml(path: pathlib.Path) -> Any:
    try:  # (imported by name: PyYAML ships no type information)
        return importlib.import_module("yaml")
    except ImportError:
        raise ConfigurationError(
            f"{path} looks like a YAML (vcrpy) cassette; reading it needs PyYAML: "
            "pip install 'dejacache[import]'") from None


def _state_of(loader: Any, node: Any, allowed: frozenset[str]) -> dict[Any, Any]:
    if node.id != "mapping":
        raise _Malformed(node.tag, "expected a mapping", node.start_mark)
    fields = loader.construct_mapping(node, deep=True)
    extra = set(fields) - allowed
    if extra:
        raise _Malformed(node.tag, f"unexpected {', '.join(sorted(map(str, extra)))}",
                         node.start_mark)
    return fields  # type: ignore[no-any-return]


def _as_bytes(loader: Any, node: Any) -> bytes:
    """``BytesIO``: PyYAML writes its state, ``(value, position, __dict__)``; the body is the
    value."""
    state = _state_of(loader, node, frozenset({"state"})).get("state")
    if not isinstance(state, (tuple, list)) or not state or not isinstance(state[0], bytes):
        raise _Malformed(node.tag, "its state must be a sequence that starts with the bytes",
                         node.start_mark)
    return state[0]


def _as_joined(loader: Any, node: Any) -> bytes:
    """An iterator over a list of chunks: ``args: [[chunk, ...]]``, ``state: 0`` (how far it
    had been read: a body sent in part is not known, so only 0)."""
    fields = _state_of(loader, node, frozenset({"args", "state"}))
    args, state = fields.get("args"), fields.get("state", 0)
    if not isinstance(args, (tuple, list)) or len(args) != 1 \
            or not isinstance(args[0], (tuple, list)) \
            or not all(isinstance(c, (bytes, str)) for c in args[0]):
        raise _Malformed(node.tag, "its args must be one list of bytes or text chunks",
                         node.start_mark)
    if state != 0 or isinstance(state, bool):
        raise _Malformed(node.tag, f"it was read up to {state!r}: the body sent is unknown",
                         node.start_mark)
    return b"".join(c.encode() if isinstance(c, str) else c for c in args[0])


def _as_str(loader: Any, node: Any) -> str:
    if node.id != "scalar":
        raise _Malformed(node.tag, "expected a scalar", node.start_mark)
    return str(loader.construct_scalar(node))


def _as_tuple(loader: Any, node: Any) -> tuple[Any, ...]:
    if node.id != "sequence":
        raise _Malformed(node.tag, "expected a sequence", node.start_mark)
    return tuple(loader.construct_sequence(node))


def _loader(yaml: Any) -> Any:
    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc]
        pass

    Loader.add_constructor(_TAG + "str", _as_str)
    Loader.add_constructor(_TAG + "unicode", _as_str)
    Loader.add_constructor(_TAG + "tuple", _as_tuple)
    Loader.add_constructor(_BYTESIO, _as_bytes)
    Loader.add_constructor(_ITER, _as_joined)
    return Loader


def _children(node: Any) -> list[Any] | None:
    if node.id == "scalar":
        return None
    if node.id == "mapping":  # (key, value) node pairs
        return [n for pair in node.value for n in pair]
    return list(node.value)


def _weight(node: Any) -> int:
    return 1 + len(node.value)


def _where(root: Any, mark: Any) -> str:
    """``interaction #3 (line 42)`` for a position in the file, or ``line 42``."""
    line = f"line {mark.line + 1}"
    if root.id != "mapping":
        return line
    for key, value in root.value:
        if key.value == "interactions" and value.id == "sequence":
            for i, item in enumerate(value.value):
                if item.start_mark.index <= mark.index < item.end_mark.index:
                    return f"interaction #{i} ({line})"
    return line


def load_yaml(raw: bytes, path: pathlib.Path) -> Any:
    """The document in ``raw``, or ``CassetteError`` naming ``path`` and why not."""
    yaml = _yaml(path)
    loader = _loader(yaml)(raw)
    node: Any = None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_expansion(node, _children, _weight, len(raw), path)
        return loader.construct_document(node)
    except _Malformed as exc:
        raise CassetteError(f"not a readable YAML cassette: {_where(node, exc.mark)}: {exc}",
                            path=path) from None
    except RecursionError:  # the pure-Python composer recurses per level; libyaml stops at 1000
        raise CassetteError(f"not a readable YAML cassette: nested deeper than {MAX_DEPTH} "
                            "levels", path=path) from None
    except CassetteError:
        raise
    except Exception as exc:  # PyYAML's own constructors fail on odd scalars with ValueError,
        # AttributeError (``!!timestamp null``) or YAMLError: all mean "not a cassette"
        where = getattr(exc, "problem_mark", None)
        at = f"{_where(node, where)}: " if where is not None and node is not None else ""
        text = " ".join(str(exc).split())
        raise CassetteError(f"not a readable YAML cassette: {at}{text}", path=path) from None
    finally:
        loader.dispose()
