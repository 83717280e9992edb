"""agentcassette recordings: steps of intercepted functions as ``@dejacache.cache`` entries.

An agentcassette file (``version: 1``) lists ``steps`` in call order, each with ``type``
(``llm``, ``tool`` or ``call``), ``name`` (the function's ``__name__`` or the ``name=`` given
to ``intercept``), ``arguments`` (``{"args": [...], "kwargs": {...}}``), ``result``, token
estimates and ``duration_ms``. Values went through agentcassette's ``to_jsonable``: tuples and
sets became lists, SDK objects their ``model_dump()``, other objects ``{"__type__": ...}`` or
``{"__repr__": ...}`` markers, and ``Cassette.redact`` wrote ``"****"`` over chosen values.

A step is written only when it can be keyed exactly as the live call would be: by the
``@dejacache.cache`` function that makes that call now, either named by the caller (the
step's name in the file says nothing about its module) or, with none named, the one imported
function decorated ``@dejacache.cache(name=...)`` with the step's name; and its key is
computed by that function's own key builder (``fn.explain``: same signature binding, ignore
list, volatile fields and namespace). Skipped, with the reason in the report:

- steps with no function given or registered under their name (or several registered), or
  whose function is not ``@dejacache.cache``-decorated;
- arguments or results holding ``__type__`` / ``__repr__`` markers (the value is gone, and a
  method's ``self`` is one), or ``"****"`` (redacted: the live value's key is unknowable);
- functions annotated to return something JSON cannot hold as itself (a dataclass, a
  pydantic model, a tuple): replay would hand back agentcassette's JSON form instead.

A result is replayed as agentcassette stored it, which is what agentcassette's own replay
returned.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from ..._engine import encode_record
from ...decorators import named
from ...errors import DejacacheError
from ...scope import current
from ..redact import Redactor
from ..store import Cassette
from .report import Converted, ImportReport, Skipped

__all__ = ["convert"]

_MARKERS = ("__type__", "__repr__")
_REDACTED = "****"  # agentcassette's REDACTION_PLACEHOLDER
_KINDS = frozenset({"llm", "tool", "call"})
_JSON_LEAVES: tuple[Any, ...] = (str, int, float, bool, type(None), dict, list, object, Any)
_JSON_CONTAINERS: tuple[Any, ...] = (dict, list, collections.abc.Mapping,
                                     collections.abc.Sequence, collections.abc.MutableMapping,
                                     collections.abc.MutableSequence)


def _lost(value: Any, path: str = "") -> str | None:
    """Where agentcassette kept a stand-in instead of the value, or None."""
    if isinstance(value, dict):
        for m in _MARKERS:
            if m in value:
                return f"{path or 'the value'} was stored as a {m} marker"
        for k, v in value.items():
            found = _lost(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _lost(v, f"{path}[{i}]")
            if found:
                return found
    return None


def _redacted(value: Any) -> bool:
    if value == _REDACTED:
        return True
    if isinstance(value, dict):
        return any(_redacted(v) for v in value.values())
    if isinstance(value, list):
        return any(_redacted(v) for v in value)
    return False


def _json_shaped(ann: Any) -> bool:
    if any(ann is t for t in _JSON_LEAVES):
        return True
    if typing.is_typeddict(ann):
        return True
    origin = typing.get_origin(ann)
    if origin is typing.Literal:
        return True
    if origin is typing.Union or origin is types.UnionType:
        return all(_json_shaped(a) for a in typing.get_args(ann))
    if any(origin is c for c in _JSON_CONTAINERS):
        return all(_json_shaped(a) for a in typing.get_args(ann) if a is not Ellipsis)
    return False


def _return_problem(fn: Callable[..., Any]) -> str | None:
    target = inspect.unwrap(fn)
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # annotations that do not resolve here: nothing to go by
        return None
    if "return" not in hints or _json_shaped(hints["return"]):
        return None
    ann = hints["return"]
    shown = getattr(ann, "__qualname__", None) or repr(ann)
    return (f"it returns {shown}; agentcassette kept only its JSON form, which replay would "
            "return instead")


def convert(doc: dict[str, Any], report: ImportReport, functions: Mapping[str, Any],
            redactor: Redactor, tape: Cassette) -> None:
    """Write every step that maps faithfully into the cassette block in force."""
    eff = current()
    problems: dict[str, str | None] = {}
    for i, step in enumerate(doc.get("steps") or []):
        if not isinstance(step, dict):
            report.skipped.append(Skipped(i, "?", "not a step object"))
            continue
        index = step.get("index", i)
        index = index if isinstance(index, int) else i
        name = str(step.get("name", ""))
        why = _why_not(step, name, functions, problems)
        if why is not None:
            report.skipped.append(Skipped(index, name, why))
            continue
        fn: Any = functions.get(name) or named(name)[0]
        arguments = step.get("arguments") or {}
        args = list(arguments.get("args") or [])
        kwargs = dict(arguments.get("kwargs") or {})
        kind = str(step.get("type", "call"))
        kind = kind if kind in _KINDS else "call"
        duration = step.get("duration_ms", 0.0)
        seconds = float(duration) / 1000 if isinstance(duration, (int, float)) else 0.0
        try:
            parts = fn.explain(*args, **kwargs)
            canonical = parts.canonical.encode()
            rec = encode_record(eff, fn.cache_name, kind, parts.key, canonical,
                                step.get("result"), seconds)
        except (DejacacheError, TypeError, ValueError) as exc:
            report.skipped.append(Skipped(index, name, f"cannot key or encode it: {exc}"))
            continue
        tape.put(parts.key, rec)  # the cassette's redactor masks credentials on the way in
        report.converted.append(Converted(index, str(fn.cache_name)))
        for arg in parts.arguments:
            if redactor.secret(arg):
                report.note_redacted(f"argument {arg}")


def _why_not(step: dict[str, Any], name: str, functions: Mapping[str, Any],
             problems: dict[str, str | None]) -> str | None:
    fn = functions.get(name)
    if fn is None:
        found = named(name) if name else []
        if len(found) > 1:
            which = ", ".join(sorted(f"{f.__module__}.{f.__qualname__}" for f in found))
            return (f"{len(found)} functions are decorated @dejacache.cache(name={name!r}) "
                    f"({which}): say which with --function {name}=module:attribute")
        if not found:
            return ("no function for it: decorate the function that makes this call now "
                    f"@dejacache.cache(name={name or 'NAME'!r}) and import its module "
                    f"(--module), or name it (--function {name or 'NAME'}=module:attribute)")
        fn = found[0]
    if not (callable(getattr(fn, "explain", None)) and getattr(fn, "cache_name", None)):
        return f"{getattr(fn, '__qualname__', fn)!r} is not decorated with @dejacache.cache"
    if name not in problems:
        problems[name] = _return_problem(fn)
    if problems[name]:
        return problems[name]
    arguments = step.get("arguments")
    if not isinstance(arguments, dict) or not isinstance(arguments.get("args", []), list) \
            or not isinstance(arguments.get("kwargs", {}), dict):
        return "its arguments are not {'args': [...], 'kwargs': {...}}"
    if "result" not in step:
        return "it has no result"
    lost = _lost(arguments, "") or _lost(step["result"], "result")
    if lost:
        return lost
    if _redacted(arguments):
        return ("an argument was redacted by agentcassette ('****'): the live call's key "
                "cannot be computed")
    return None
