"""Where a request's cache breakpoints should be, from the request alone: the markers to add,
and those the request already has that buy nothing, moved.

One rule, used by the planner (priced on recordings) and at runtime (``apply=["breakpoints"]``,
spliced into the request's bytes), so both place the same markers.

Planned places, within the provider's limit of breakpoints per request:

- **the end of what every request shares**: the last tool or system block (Anthropic), the last
  part of the leading system/developer messages (OpenAI from gpt-5.6), *before the first one
  holding a value that changes with every request* (``spans.find``: a timestamp, a clock with
  seconds, a uuid, an epoch, a message or request id): an entry ending after it is never
  read again. The runtime moves markers on this alone, with no earlier request to compare,
  so only values that are practically never stable count: a date (once a day), a bare
  ``9:00`` (office hours), a long hex string (a commit) or ``step 3`` stay in.
- **the conversation's end** (Anthropic): top-level ``cache_control`` (the API marks the last
  block), unless the last block already carries one. OpenAI's implicit breakpoint is there
  already.

Markers the request carries are kept, except those that buy nothing, which are moved:

- a marker on a shared block at or after the first volatile one (its entry ends after the
  clock, so the next request never repeats it);
- markers beyond the provider's limit (the model takes the latest ones, the earliest are
  ignored: Anthropic's API rejects such a request outright, so a recording that carries them
  came through a gateway that dropped them);
- with the limit reached and no marker at the conversation's end, the earliest marker in the
  messages when the conversation's end is more than the lookback (20 blocks) past the latest
  marker: the next request's breakpoint can no longer find the entries written before.

A string system prompt or string content cannot carry a marker without changing its JSON shape,
so it gets none. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .cache_rules import BREAKPOINTS, IMPLICIT, CacheRules
from .json_edit import DELETE, Path
from .spans import find

__all__ = ["EPHEMERAL", "Move", "Placement", "place", "show"]

EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
_EXPLICIT: dict[str, Any] = {"mode": "explicit"}
Edit = tuple[Path, str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Move:
    """A marker taken off ``source`` (and put on ``target``, "" when it only goes)."""

    source: str
    target: str
    why: str


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    edits: tuple[Edit, ...] = ()  # DELETE values remove a marker
    moves: tuple[Move, ...] = ()


def show(path: Path) -> str:
    """``("messages", 3, "content", 0)`` -> ``messages[3].content[0]``; ``()``: top level."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else f".{step}" if out else step
    return out or "top level"


_PER_REQUEST = frozenset({"timestamp", "uuid", "epoch", "id"})


def _volatile(value: Any, tool: bool) -> str | None:
    """The first value in ``value``'s text (a tool's descriptions only) that changes with
    every request (see the module)."""
    if isinstance(value, str):
        return next((found for kind, _, found in find(value) if kind in _PER_REQUEST or (
            kind == "time" and found.count(":") == 2)), None)
    if isinstance(value, dict):
        for k, v in value.items():
            if tool and isinstance(v, str) and k != "description":
                continue
            hit = _volatile(v, tool)
            if hit is not None:
                return hit
    elif isinstance(value, list):
        for v in value:
            hit = _volatile(v, tool)
            if hit is not None:
                return hit
    return None


def _at(body: Any, path: Path, name: str) -> Any:
    """The member ``name`` of the object at ``path`` (None: none)."""
    for step in path:
        body = body[step]
    return body.get(name)


def _marked(block: Any, name: str) -> bool:
    return type(block) is dict and block.get(name) is not None


@dataclasses.dataclass(slots=True)
class _Shared:
    """The blocks every request repeats, in order: (path or None when it cannot carry a marker,
    the block, a tool)."""

    blocks: list[tuple[Path | None, Any, bool]]

    def cut(self) -> tuple[int, str | None]:
        """(index of the first volatile block or len, the volatile text)."""
        for i, (_, block, tool) in enumerate(self.blocks):
            hit = _volatile(block, tool)
            if hit is not None:
                return i, hit
        return len(self.blocks), None

    def end(self, cut: int) -> Path | None:
        return self.blocks[cut - 1][0] if cut else None


def place(api: str, body: Mapping[str, Any], rules: CacheRules) -> Placement:
    """The markers to add and to move for ``body`` (see the module)."""
    if rules.mode == BREAKPOINTS and api == "messages":
        return _anthropic(body, rules)
    if rules.mode == IMPLICIT and api in ("chat", "responses"):
        return _openai(api, body, rules.max_breakpoints)
    return Placement()


# ---------------------------------------------------------------- Anthropic


_Mark = tuple[Path, int, bool, Any]


def _anthropic_marks(body: Mapping[str, Any]) -> tuple[list[_Mark], int]:
    """Every ``cache_control`` (path of the object carrying it, content blocks up to the end of
    its item, on a shared block, its value), and the request's blocks in all."""
    out: list[_Mark] = []
    n = 0
    for field in ("tools", "system"):
        seq = body.get(field)
        if type(seq) is list:
            for i, b in enumerate(seq):
                n += 1
                if _marked(b, "cache_control"):
                    out.append(((field, i), n, True, b["cache_control"]))
        elif seq:
            n += 1
    for i, msg in enumerate(body.get("messages") or []):
        content = msg.get("content") if type(msg) is dict else None
        blocks = content if type(content) is list else []
        n += max(1, len(blocks))
        for j, block in enumerate(blocks):
            if _marked(block, "cache_control"):
                out.append((("messages", i, "content", j), n, False, block["cache_control"]))
            inner = block.get("content") if type(block) is dict else None
            for k, b in enumerate(inner if type(inner) is list else []):
                if _marked(b, "cache_control"):
                    out.append((("messages", i, "content", j, "content", k), n, False,
                                b["cache_control"]))
    if _marked(body, "cache_control"):
        out.append(((), n, False, body["cache_control"]))
    return out, n


def _anthropic_shared(body: Mapping[str, Any]) -> _Shared:
    blocks: list[tuple[Path | None, Any, bool]] = []
    for field in ("tools", "system"):
        seq = body.get(field)
        if type(seq) is list:
            blocks += [((field, i) if type(b) is dict else None, b, field == "tools")
                       for i, b in enumerate(seq)]
        elif seq:
            blocks.append((None, seq, False))
    return _Shared(blocks)


def _anthropic(body: Mapping[str, Any], rules: CacheRules) -> Placement:
    messages = body.get("messages")
    if type(messages) is not list or not messages:
        return Placement()
    marks, total = _anthropic_marks(body)
    shared = _anthropic_shared(body)
    cut, clock = shared.cut()
    stable = shared.end(cut)
    after = {p for p, _, _ in shared.blocks[cut:] if p is not None}
    gone: list[tuple[Path, str]] = [
        (p, f"after the volatile `{clock}`") for p, _, head, _ in marks if head and p in after]
    kept = [m for m in marks if m[0] not in after]
    over = len(kept) - rules.max_breakpoints
    if over > 0:
        gone += [(m[0], f"beyond the limit of {rules.max_breakpoints}") for m in kept[:over]]
        kept = kept[over:]
    last = messages[-1]
    content = last.get("content") if type(last) is dict else None
    tail = ("messages", len(messages) - 1, "content", len(content) - 1) \
        if type(content) is list and content else None
    at_end = any(m[0] in ((), tail) for m in kept)
    adds: list[Path] = [] if at_end else [()]
    if stable is not None and stable not in {m[0] for m in kept}:
        adds.append(stable)
    if not at_end and len(kept) >= rules.max_breakpoints and rules.lookback is not None \
            and total - kept[-1][1] > rules.lookback:
        early = next((m for m in kept if not m[2]), None)
        if early is not None:
            gone.append((early[0], f"{total - kept[-1][1]} blocks before the conversation's "
                                   f"end, past the {rules.lookback}-block lookback"))
            kept.remove(early)
    adds = adds[:max(0, rules.max_breakpoints - len(kept))]
    # A moved marker keeps what it asked for (a 1 h lifetime): the first one taken off.
    taken = {p for p, _ in gone}
    mark = next((m[3] for m in marks if m[0] in taken and isinstance(m[3], dict)), EPHEMERAL)
    edits: list[Edit] = [(p, "cache_control", DELETE) for p, _ in gone]
    placed = [(m[0], m[3]) for m in kept]
    values: dict[Path, dict[str, Any]] = {}
    for p in sorted(adds, key=_order):  # each lifetime read against the markers before it
        value = _in_order(p, mark, placed)
        if value is not None:
            placed.append((p, value))
            values[p] = value
    adds = [p for p in adds if p in values]
    edits += [(p, "cache_control", values[p]) for p in adds]
    return Placement(tuple(edits), _moves(gone, adds, stable))


def _order(path: Path) -> tuple[int, ...]:
    """Where the block at ``path`` is rendered: tools, system, messages, then the last block
    (top-level ``cache_control``)."""
    if not path:
        return (3,)
    return ({"tools": 0, "system": 1}.get(str(path[0]), 2),
            *(s for s in path[1:] if isinstance(s, int)))


def _long(mark: Any) -> bool:
    return isinstance(mark, dict) and mark.get("ttl") == "1h"


def _in_order(path: Path, mark: Any, placed: list[tuple[Path, Any]]) -> dict[str, Any] | None:
    """``mark`` for a marker added at ``path``, its lifetime changed where Anthropic requires
    it: a 1 h entry may not follow a 5-minute one (the API refuses the request), so a marker
    before a 1 h one is 1 h and one after a 5-minute one is 5 minutes (None: both, which the
    request already breaks)."""
    at = _order(path)
    must_long = any(_long(m) for p, m in placed if _order(p) > at)
    must_short = any(not _long(m) for p, m in placed if _order(p) < at)
    if must_long and must_short:
        return None
    value = dict(mark)
    if must_long:
        value["ttl"] = "1h"
    elif must_short and _long(value):
        del value["ttl"]
    return value


def _moves(gone: list[tuple[Path, str]], adds: list[Path], stable: Path | None
           ) -> tuple[Move, ...]:
    """Each marker removed, paired with where its replacement goes: the shared prefix's end
    for one after a volatile value, the conversation's end otherwise."""
    out = []
    for path, why in gone:
        volatile = why.startswith("after the volatile")
        target = stable if volatile and stable in adds else () if () in adds else None
        out.append(Move(show(path), "" if target is None else show(target), why))
    return tuple(out)


# ---------------------------------------------------------------- OpenAI (gpt-5.6 on)


def _openai(api: str, body: Mapping[str, Any], limit: int) -> Placement:
    field = "messages" if api == "chat" else "input"
    items = body.get(field)
    if type(items) is not list:
        return Placement()
    options = body.get("prompt_cache_options")
    explicit_mode = type(options) is dict and options.get("mode") == "explicit"
    name = "prompt_cache_breakpoint"
    marks: list[Path] = []
    blocks: list[tuple[Path | None, Any, bool]] = []
    leading = True
    for i, it in enumerate(items):
        content = it.get("content") if type(it) is dict else None
        parts = content if type(content) is list else []
        marks += [(field, i, "content", j) for j, p in enumerate(parts) if _marked(p, name)]
        leading = leading and type(it) is dict and it.get("role") in ("system", "developer")
        if leading:
            blocks += [((field, i, "content", j) if type(p) is dict else None, p, False)
                       for j, p in enumerate(parts)] if parts else [(None, content, False)]
    if not blocks:
        return Placement()
    shared = _Shared(blocks)
    cut, clock = shared.cut()
    stable = shared.end(cut)
    after = {p for p, _, _ in blocks[cut:] if p is not None}
    gone = [(p, f"after the volatile `{clock}`") for p in marks if p in after]
    kept = [p for p in marks if p not in after]
    room = limit - (0 if explicit_mode else 1)
    if len(kept) > room:
        gone += [(p, f"beyond the limit of {room} explicit breakpoints")
                 for p in kept[:len(kept) - room]]
        kept = kept[len(kept) - room:]
    adds = [stable] if stable is not None and stable not in kept and len(kept) < room else []
    # A moved marker keeps what it asked for (a 12 h lifetime): the first one taken off.
    mark = next((v for v in (_at(body, p, name) for p, _ in gone) if isinstance(v, dict)),
                _EXPLICIT)
    edits: list[Edit] = [(p, name, DELETE) for p, _ in gone]
    edits += [(p, name, dict(mark)) for p in adds]
    moves = tuple(Move(show(p), show(adds[0]) if adds and why.startswith("after") else "", why)
                  for p, why in gone)
    return Placement(tuple(edits), moves)
