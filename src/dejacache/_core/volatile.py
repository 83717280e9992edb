"""What ``volatile=`` names: field names, dotted/wildcard paths, and patterns inside text.

A volatile item is one of
* a field name (``"trace_id"``): that key is dropped wherever it appears;
* a path (``"messages[*].content"``, ``"body.metadata.run"``, ``"items[0]"``): the value at
  that place is dropped (a key) or replaced by :data:`PLACEHOLDER` (a list position, so later
  positions keep their meaning); lists met on the way are walked, ``[*]`` says so explicitly;
* ``"!name"``: the opposite of a name: a field or request header left out of keys by default
  (``"!user-agent"``, ``"!traceparent"``) or by an outer list (``configure``'s, a scope's) is
  keyed after all, in every spelling (``keys.kept_out``: the one rule of every face). A
  credential cannot be kept (it keys only as a keyed mask or an identity digest), and one
  list that says both ``"x"`` and ``"!x"`` contradicts itself (:func:`check`);
* a compiled regular expression: every match inside any string is replaced by
  :data:`PLACEHOLDER` before keying, so the stored request shows where volatile text was
  (a judge prompt's ``<opentelemetry_traces>`` digest, a timestamp inside a system prompt).
  In ``DEJACACHE_VOLATILE`` a pattern is written ``re:PATTERN``.

Telemetry ids (:data:`TELEMETRY`: ``trace_id``, ``span_id``...) are volatile by default only
where telemetry lives (:func:`telemetry_at`): in a ``metadata`` (or ``_meta``, ``headers``)
object at any depth, and in a message (an item of a ``messages`` list, or a dict with a
``role`` in any list), where langwatch-scenario puts a fresh ``trace_id`` on every message
of every run. A function's own parameter, a URL query parameter or a request body's own field
of that name is what the call asks about (``fetch_trace(trace_id)``, ``GET
/traces?trace_id=...``) and is keyed; written in ``volatile=`` the name is dropped wherever
it appears, like any other.

Credentials come first: a pattern never sees a value under a credential name, a secret-shaped
string, a keyed mask, or a credential inside a URL query (masked before the pattern runs), so
no pattern can make two credentials key alike. A literal :data:`PLACEHOLDER` in the text is
escaped (``<volatile\\>``), so it never keys like a replaced match. Patterns that can take
exponential time are refused when parsed (see ``redos``).

Pure functions: parsed once per key builder, applied per call (by ``volatile_apply``, loaded
only where something is declared), never mutating the input.

A path that never matches is reported, not silently kept: a block that declares paths
watches which of them the calls keyed inside it tried and matched (``volatile_watch``) and
warns at exit about its own paths tried and never matched; a path never tried (no call had
its first name, no call at all) says nothing. Whether ``body.metadata.run`` is a typo or a
field these requests just lack cannot be told before a request is seen, and any first name
is a valid start (a parameter of some function, or a body field), so nothing is refused when
a path is declared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from .. import _secrets
from .._lazy import pattern, served
from ..errors import ConfigurationError

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any
    from typing import NamedTuple as Row  # checked as one: see _slots.Row
else:
    from .._slots import Row

__all__ = [
    "TELEMETRY",
    "BlockPaths",
    "Masked",
    "PLACEHOLDER",
    "Path",
    "REQUEST_ROOTS",
    "Volatility",
    "apply",  # defined in volatile_apply, served by __getattr__
    "check",
    "declared_paths",
    "parse",
    "parse_path",
    "telemetry_at",
    "telemetry_below",
    "telemetry_item",
    "under",
]

if TYPE_CHECKING:
    from .volatile_apply import apply

# ``apply`` is read (``_vol.apply``) only by calls that declare a path or pattern: its module
# is imported then, and the name kept here, so each later call reads a plain attribute.
__getattr__ = served(__name__, {"apply": "dejacache._core.volatile_apply"})

PLACEHOLDER = "<volatile>"

#: Ids a tracer gives every run: volatile by default where telemetry lives, and only there.
TELEMETRY = frozenset({"trace_id", "span_id", "parent_span_id", "correlation_id",
                       "otel_trace_id", "otel_span_id"})
# Keys whose value is telemetry throughout: the SDKs' and tracers' ``metadata``, MCP's
# ``_meta``, a request's ``headers`` (trace ids as headers: ``Trace-Id``).
_HOLDERS = frozenset({"metadata", "_meta", "headers"})
# Keys whose list holds messages (scenario's ``AgentInput.new_messages``): each is one,
# whether or not it still has its ``role`` once volatile paths ran (``messages[0].role``).
_MESSAGE_LISTS = frozenset({"messages", "new_messages"})

# Where a value sits, as a walk passes it down from the top (0: anywhere else): an item of a
# list, a list of messages, an item of one, or anywhere under a holder.
_ITEM, _MESSAGES, _MESSAGE, _HELD = 1, 2, 3, 4
_BELOW_KEY = {**dict.fromkeys(_HOLDERS, _HELD), **dict.fromkeys(_MESSAGE_LISTS, _MESSAGES)}
_BELOW_HELD: dict[str, int] = {}


def telemetry_below(place: int) -> tuple[dict[str, int], int]:
    """The places of the values of a mapping at ``place``: ``(by key, otherwise)``, read
    per key with one ``dict.get`` (a call per key cost the general canonicaliser ~8%)."""
    return (_BELOW_HELD, _HELD) if place == _HELD else (_BELOW_KEY, 0)


def telemetry_item(place: int) -> int:
    """The place of an item of a list at ``place``."""
    if place == _HELD:
        return _HELD
    return _MESSAGE if place == _MESSAGES else _ITEM


def telemetry_at(place: int, mapping: Mapping[Any, Any]) -> bool:
    """Whether :data:`TELEMETRY` ids in ``mapping``, at ``place``, are telemetry: under a
    holder, or ``mapping`` is a message: an item of a list of ``messages``, or of any list
    when it has a ``role``."""
    return place >= _MESSAGE or (place == _ITEM and "role" in mapping)


# A step is a key (str), an index (int) or every element (None).
Step = str | int | None
Path = tuple[Step, ...]

# Compiled when first used (~1 ms of this module's import for these and volatile_apply's
# ``_LITERAL``): only declared paths and patterns read them, and most blocks declare neither.
_SEGMENT = pattern(r"([^.\[\]]+)?((?:\[(?:\*|\d+)\])*)")
_INDEX = pattern(r"\[(\*|\d+)\]")


# A named tuple, not a frozen dataclass: ~0.15 against ~1 ms to define on the 2-core box, in
# a module every first cassette block loads.
class Masked(list["Any"]):
    """A receiver's form ``[tag, data]`` the volatile patterns have run over (its data's
    text, never its tags): ``_vol.apply``, which the key runs over every argument, walks
    exact lists only, so it leaves this one as it is and no text is masked twice (a second
    pass escaped each placeholder, ``<volatile\\>``, as a literal one, and masked the tags:
    ``Run2`` keyed as ``Run3``). orjson writes it as the list it is. Made only where patterns
    are declared."""

    __slots__ = ()


class Volatility(Row):
    names: frozenset[str] = frozenset()
    paths: tuple[Path, ...] = ()
    patterns: tuple[re.Pattern[str], ...] = ()
    #: names written ``!name``: keyed although dejacache leaves them out by default
    keep: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.names or self.paths or self.patterns or self.keep)


def _is_path(item: str) -> bool:
    return "." in item or "[" in item


def parse_path(text: str) -> Path:
    """``"messages[*].content"`` -> ``("messages", None, "content")``."""
    steps: list[Step] = []
    for part in text.split("."):
        m = _SEGMENT.fullmatch(part)
        if not part or m is None or (m.group(1) is None and not steps and not m.group(2)):
            raise ConfigurationError(
                f"volatile path {text!r} is malformed at {part!r}: write dotted names with "
                "optional [N] or [*] after each, e.g. 'body.messages[*].content'")
        if m.group(1) is not None:
            steps.append(m.group(1))
        for idx in _INDEX.findall(m.group(2) or ""):
            steps.append(None if idx == "*" else int(idx))
    if not steps:
        raise ConfigurationError(f"volatile path {text!r} names nothing")
    return tuple(steps)


def parse(items: Iterable[str | re.Pattern[str]] | None) -> Volatility:
    """Split ``volatile=`` items into names, paths and patterns (errors name the item)."""
    names: set[str] = set()
    keep: set[str] = set()
    paths: list[Path] = []
    patterns: list[re.Pattern[str]] = []
    for item in items or ():
        if isinstance(item, re.Pattern):
            if not isinstance(item.pattern, str):
                raise ConfigurationError(f"volatile pattern {item.pattern!r} must be a str "
                                         "pattern, not bytes")
            patterns.append(_checked(item))
        elif isinstance(item, str) and item.startswith("re:"):
            try:
                pat = re.compile(item[3:])
            except re.error as exc:
                raise ConfigurationError(f"volatile pattern {item[3:]!r}: {exc}") from None
            patterns.append(_checked(pat))
        elif isinstance(item, str) and item.startswith("!"):
            if not item[1:] or _is_path(item[1:]):
                raise ConfigurationError(
                    f"volatile item {item!r}: '!' keys one field or header by name "
                    "(e.g. '!user-agent'), not a path or nothing")
            keep.add(_keepable(item))
        elif isinstance(item, str) and item:
            if _is_path(item):
                paths.append(parse_path(item))
            else:
                names.add(item)
        else:
            raise ConfigurationError(
                f"volatile items are field names, dotted paths or compiled patterns, "
                f"not {item!r}")
    return Volatility(frozenset(names), tuple(dict.fromkeys(paths)),
                      tuple(dict.fromkeys(patterns)), frozenset(keep))


def _keepable(item: str) -> str:
    """The name of a ``!name`` item, refused when it is a credential: a credential keys only
    as a keyed mask (a header: an identity digest), never as it is, so keeping it would be
    a silent no-op at best."""
    name = item[1:]
    if _secrets.is_secret_name(name) or not _secrets.name_forms(name).isdisjoint(
            _secrets.SENSITIVE_HEADERS):
        raise ConfigurationError(
            f"volatile item {item!r}: {name!r} names a credential or an account, which a key "
            "holds only as a keyed mask (a header: as a digest of who is asking), never as "
            f"it is; remove {item!r}")
    return name


def check(items: Iterable[str | re.Pattern[str]] | None) -> Volatility:
    """:func:`parse` of one list as a user wrote it (``volatile=``, ``DEJACACHE_VOLATILE``,
    the project file), refusing a name it both drops and keeps (``"x"`` with ``"!x"``, in
    any spelling). Lists are joined outer to inner before keys read them, so an inner
    ``"!x"`` keeps what an outer ``"x"`` dropped; only one list saying both is refused."""
    spec = parse(items)
    for name in sorted(spec.names):  # (lists are short: a few names each)
        for kept in sorted(spec.keep):
            if not _secrets.name_forms(name).isdisjoint(_secrets.name_forms(kept)):
                raise ConfigurationError(
                    f"volatile items {name!r} and {'!' + kept!r} contradict each other: the "
                    "first leaves the name out of keys, the second keys it; keep one")
    return spec


def _checked(pat: re.Pattern[str]) -> re.Pattern[str]:
    if pat.fullmatch(""):
        raise ConfigurationError(
            f"volatile pattern {pat.pattern!r} matches the empty string, so it would insert "
            "placeholders everywhere")
    # Imported here: only a declared pattern is checked, and the checker's module (~0.35 ms
    # to import) is then off the path of every block that declares none.
    from .redos import exponential

    why = exponential(pat)
    if why is not None:
        # Measured: ``(a+)+$`` took 7 s on a 25-character argument, doubling per character.
        raise ConfigurationError(
            f"volatile pattern {pat.pattern!r} can take exponential time on some text ({why}); "
            "rewrite it so no repeated part can match the same text in two ways, or make the "
            "inner repetition possessive (a++) or atomic ((?>...))")
    return pat


#: The top level of an HTTP request's canonical form: a path that starts elsewhere is read
#: under ``body`` (:func:`under`).
REQUEST_ROOTS = frozenset({"method", "path", "query", "body", "headers"})


def under(paths: tuple[Path, ...], roots: frozenset[str], default: str) -> tuple[Path, ...]:
    """Paths for a request whose top level is ``roots``: one that starts elsewhere is read as
    relative to ``default`` (``messages[*].content`` means ``body.messages[*].content`` for an
    HTTP request), so a path written for the body is never silently ignored."""
    return tuple(p if p[0] in roots else (default, *p) for p in paths)


def declared_paths(items: Iterable[str | re.Pattern[str]]) -> dict[str, tuple[Path, ...]]:
    """The paths among ``volatile=`` items, by their text, each with the forms calls apply it
    in: as written (rooted at a function's parameters) and as read for an HTTP request."""
    out: dict[str, tuple[Path, ...]] = {}
    for item in items:
        if isinstance(item, str) and not item.startswith("re:") and _is_path(item):
            p = parse_path(item)
            out[item] = tuple(dict.fromkeys((p, *under((p,), REQUEST_ROOTS, "body"))))
    return out


class BlockPaths:
    """A block's own volatile paths (``scope``, ``cassette``, ``intercept``), watched while
    the block is open and reported when it exits."""

    __slots__ = ("paths", "where")

    def __init__(self, items: Iterable[str | re.Pattern[str]], where: str) -> None:
        self.paths = declared_paths(items)
        self.where = where

    def enter(self) -> None:
        if self.paths:
            # Imported by blocks that declare paths only: most declare none.
            from .volatile_watch import watch

            watch(self)

    def exit(self, *, quiet: bool = False) -> None:
        """``quiet``: stop watching without reporting (a block cut short proves nothing
        about the paths its calls never reached)."""
        if self.paths:
            from .volatile_watch import report, unwatch

            seen = unwatch(self)
            if not quiet:
                report(seen, self.paths, self.where)
