"""The smallest set of volatile rules that explains the differences between two recordings of
the same calls, none of them merging calls that were answered differently.

Spans inside strings become ``re:`` rules, one per shape where the shape is distinctive
(every ISO timestamp, every UUID), else one per shape and the literal text around it
(``(?<=nonce=)[0-9a-f]{16}``); whole fields that differ become paths
(``body.metadata.request_id``, list positions as ``[*]``), unless a pattern already masks
them. Each candidate is checked before it is kept: it must parse and pass the exponential-
time check, mask what it was written for, and pass ``check`` (for ``dejacache learn``: no
two calls of a recording answered differently may share a key under the rules, and no call
of one run may key like another call of the other). A candidate that fails is reported with
the reason, and what it would have explained stays unexplained. Rules that add nothing once
the others are chosen are dropped.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .._core.shapes import SHAPES, Shape, Span, common_after, common_before, rule_for
from .._core.volatile import Path, parse
from .._secrets import guarded
from ..errors import ConfigurationError
from .diffs import FIELD, SPAN, Difference, at, generalised, path_text
from .masking import Rules, canonical, is_http, masked

__all__ = ["CallRef", "Observed", "Proposal", "Refused", "Rule", "propose", "residual"]

#: ``check(rules)``: why these rules key some calls wrongly, or None.
Check = Callable[[Rules], "str | None"]


@dataclasses.dataclass(frozen=True, slots=True)
class CallRef:
    """A call as a report names it: its cassette, its step there, its name."""

    cassette: str
    index: int
    name: str

    def __str__(self) -> str:
        return f"{self.cassette} #{self.index} {self.name}"


@dataclasses.dataclass(slots=True)
class Observed:
    """One call seen twice: ``a`` and ``b`` are its two requests (``b`` with the answers it
    quotes translated), ``diffs`` where they differ."""

    ref: CallRef
    kind: str
    a: Any
    b: Any
    diffs: list[Difference]


Evidence = tuple[CallRef, str]


@dataclasses.dataclass(slots=True)
class Rule:
    """A rule kept: its text as ``volatile`` takes it, what it is, what it explains."""

    text: str
    what: str
    explains: list[Evidence] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class Refused:
    """Differences no rule was kept for, and why (``rule``: the candidate refused, if any)."""

    what: str
    reason: str
    where: list[Evidence]
    rule: str | None = None


@dataclasses.dataclass(slots=True)
class Proposal:
    rules: list[Rule]
    refused: list[Refused]
    #: differences in ordinary text, structure or credentials: never volatile
    other: list[tuple[CallRef, Difference]]
    calls: int = 0
    #: calls whose two requests differ with no rule, and with the rules kept
    differing_before: int = 0
    differing_after: int = 0
    #: volatile-shaped spans and whole fields seen, and how many the rules mask
    volatile_seen: int = 0
    volatile_masked: int = 0

    @property
    def texts(self) -> list[str]:
        return [r.text for r in self.rules]


_Item = tuple[Observed, Difference, Span | None]


def _evidence(items: Iterable[_Item]) -> list[Evidence]:
    return list(dict.fromkeys((o.ref, d.where) for o, d, _ in items))


def _covers(rule: Rules, text: str, span: tuple[int, int]) -> bool:
    """Whether a pattern of ``rule`` masks ``text[span]`` (a credential never is)."""
    lo, hi = span
    for a, b, _ in guarded(text):
        if a < hi and lo < b:
            return False
    for pat in rule.patterns:
        for m in pat.finditer(text):
            if m.start() <= lo and m.end() >= hi and m.end() > m.start():
                return True
            if m.start() > lo:
                break
    return False


class _Chooser:
    """The candidates tried in turn; see the module docstring."""

    def __init__(self, observed: Sequence[Observed], check: Check, base: Sequence[str]) -> None:
        self.observed = observed
        self.check = check
        self.base = list(base)  # rules already in force: candidates come on top
        self.chosen: list[Rule] = []
        self.refused: list[Refused] = []

    def rules(self, extra: Sequence[str] = ()) -> Rules:
        return Rules([*self.base, *(r.text for r in self.chosen), *extra])

    def attempt(self, text: str, what: str, items: list[_Item],
                explains: Callable[[Rules, _Item], bool], *, quiet: bool = False
                ) -> list[_Item]:
        """Keep ``text`` if it is sound; returns the items it explains ([] when refused;
        ``quiet``: a finer rule will be tried next, so the refusal is not reported)."""
        if any(r.text == text for r in self.chosen):  # kept for other places already
            alone = Rules([text])
            return [it for it in items if explains(alone, it)]
        why: str | None
        try:
            parse([text])
        except ConfigurationError as exc:
            why = f"the rule is refused: {exc}"
        else:
            alone = Rules([text])
            done = [it for it in items if explains(alone, it)]
            why = None if done else ("the rule would not mask it (a credential, or text a "
                                     "pattern cannot reach)")
            why = why or self.check(self.rules([text]))
        if why is not None:
            if not quiet:
                self.refused.append(Refused(what, why, _evidence(items), text))
            return []
        self.chosen.append(Rule(text, what, _evidence(done)))
        return done


def _without(items: list[_Item], done: list[_Item]) -> list[_Item]:
    """``items`` less ``done`` (by identity: comparing the dataclasses field by field made a
    cassette of 2,500 calls take 16 s here, quadratic in its spans)."""
    gone = {id(it) for it in done}
    return [it for it in items if id(it) not in gone]


def _span_explained(rule: Rules, item: _Item) -> bool:
    _, diff, span = item
    assert span is not None
    return _covers(rule, diff.a, span.a) and _covers(rule, diff.b, span.b)


def _spans(ch: _Chooser) -> None:
    """Pattern rules for the spans inside strings, shape by shape."""
    by_shape: dict[str, list[_Item]] = collections.defaultdict(list)
    for o in ch.observed:
        for d in o.diffs:
            if d.kind == SPAN:
                for s in d.spans:
                    if s.shape is not None:
                        by_shape[s.shape.name].append((o, d, s))
    for shape in SHAPES:
        items = by_shape.get(shape.name, [])
        if not items:
            continue
        texts = _texts(items)
        if shape.strong:
            bare = rule_for(shape, texts, bare=True)
            assert bare is not None
            done = ch.attempt(bare, shape.name, items, _span_explained)
            items = _without(items, done)
        _anchored_rules(ch, shape, items)


def _anchored_rules(ch: _Chooser, shape: Shape, items: list[_Item]) -> None:
    """Coarse groups first (by the character just before: one rule for `"started_at": ` and
    `"finished_at": `), then finer ones for what a coarser rule could not take; only the
    finest level's refusals are reported."""
    for level, key in enumerate(_LEVELS):
        if not items:
            return
        groups: dict[tuple[str, ...], list[_Item]] = collections.defaultdict(list)
        for it in items:
            sp = it[2]
            assert sp is not None
            groups[key(sp)].append(it)
        last = level == len(_LEVELS) - 1
        done: list[_Item] = []
        for group in groups.values():
            done += _anchored_rule(ch, shape, group, quiet=not last, level=level)
        items = _without(items, done)


def _texts(items: Iterable[_Item]) -> list[str]:
    out: list[str] = []
    for _, _, s in items:
        if s is not None:
            out += [s.a_text, s.b_text]
    return out


#: How spans of one shape are grouped into one rule, coarsest first: by the character
#: before them, then with the one after, then by all the text before them.
_LEVELS: tuple[Callable[[Span], tuple[str, ...]], ...] = (
    lambda sp: (sp.before[-1:] or "|" + sp.after[:1],),
    lambda sp: (sp.before[-1:], sp.after[:1]),
    lambda sp: (sp.before, sp.after[:1]),
)


def _anchored_rule(ch: _Chooser, shape: Shape, group: list[_Item], *, quiet: bool = False,
                   level: int = len(_LEVELS) - 1) -> list[_Item]:
    spans = [s for _, _, s in group if s is not None]
    before = common_before(s.before for s in spans)
    after = common_after(s.after for s in spans)
    if level == 0 and len(before) + len(after) < 3:
        return []  # the coarsest rule stands on three characters of context at least
    text = rule_for(shape, _texts(group), before, after)
    if text is None:
        if not quiet:
            ch.refused.append(Refused(shape.name, f"a {shape.name} with no literal text "
                                      "around it that every occurrence shares, so no rule "
                                      "can tell it from the same shape where it matters",
                                      _evidence(group)))
        return []
    return ch.attempt(text, shape.name, group, _span_explained, quiet=quiet)


def _field_explained(rule: Rules, item: _Item) -> bool:
    o, d, _ = item
    a, b = masked(o.a, o.kind, rule), masked(o.b, o.kind, rule)
    now = at(a, d.path)
    return bool(now != at(o.a, d.path) and now == at(b, d.path))


def _values(tree: Any, path: Path) -> list[Any]:
    """Every value at ``path`` (``None`` steps: every list element)."""
    if not path:
        return [tree]
    head, rest = path[0], path[1:]
    if head is None:
        return [v for x in tree for v in _values(x, rest)] if type(tree) is list else []
    if type(tree) is dict and isinstance(head, str) and head in tree:
        return _values(tree[head], rest)
    if type(tree) is list and isinstance(head, int) and head < len(tree):
        return _values(tree[head], rest)
    return []


def _writable(path: Path) -> bool:
    return all(s is None or isinstance(s, int) or (
        s and not any(c in s for c in ".[]") and s.strip() == s) for s in path)


def _fields(ch: _Chooser, by_place: bool) -> None:
    """Path rules for whole fields no pattern masks, grouped by their place."""
    groups: dict[tuple[bool, Path], list[_Item]] = collections.defaultdict(list)
    for o in ch.observed:
        for d in o.diffs:
            if d.kind == FIELD:
                groups[(is_http(o.kind, o.a), generalised(d.path))].append((o, d, None))
    current = ch.rules()
    for (http, gpath), items in sorted(groups.items(), key=lambda kv: path_text(kv[0][1])):
        left = [it for it in items if not _field_explained(current, it)]
        if not left:  # a pattern masks the whole value already
            continue
        shape = left[0][1].shape
        what = "field" if shape is None else shape.name
        why = _unwritable(gpath, http)
        if why is not None and shape is not None and shape.strong and \
                all(d.shape is shape for _, d, _ in left):
            # No path can name it, but its shape is distinctive: mask the shape instead.
            bare = rule_for(shape, [], bare=True)
            assert bare is not None
            if ch.attempt(bare, what, left, _field_explained):
                current = ch.rules()
                continue
        why = why or _not_by_place(ch.observed, gpath, left, by_place)
        if why is not None:
            ch.refused.append(Refused(what, why, _evidence(left)))
            continue
        if not ch.attempt(path_text(gpath), what, left, _field_explained):
            concrete = {d.path for _, d, _ in left}
            if len(concrete) > 1 or next(iter(concrete)) != gpath:
                for p in sorted(concrete, key=path_text):
                    ch.attempt(path_text(p), what, [it for it in left if it[1].path == p],
                               _field_explained)
        current = ch.rules()


def _unwritable(path: Path, http: bool) -> str | None:
    if not _writable(path):
        return "its place cannot be written as a dotted path"
    if len(path) < 2:
        where = path_text(path)
        if http:
            return f"the request's {where!r} differs as a whole: not a field a rule names"
        return (f"argument {where!r} differs as a whole: leave it out of the key with "
                f"@cache(ignore=[{where!r}]) (a one-word volatile item would drop that name "
                "at every depth)")
    return None


def _not_by_place(observed: Sequence[Observed], gpath: Path, left: list[_Item],
                  by_place: bool) -> str | None:
    """Why a field with no volatile shape is not volatile by its place (None: it is)."""
    if any(d.shape is not None for _, d, _ in left):
        return None  # a timestamp, a UUID...: volatile by shape
    if not by_place:
        return ("a value with no volatile shape; one recording and one call cannot tell "
                "whether it varies on every run")
    same = differ = 0
    for o in observed:
        va, vb = _values(o.a, gpath), _values(o.b, gpath)
        for x, y in zip(va, vb, strict=False):
            same += x == y
            differ += x != y
    if same:
        return (f"not volatile by place: equal in {same} of {same + differ} calls, so it "
                "says something about the call")
    return None


def residual(observed: Sequence[Observed], rules: Rules) -> int:
    """Calls whose two requests still differ under ``rules``."""
    return sum(canonical(masked(o.a, o.kind, rules)) != canonical(masked(o.b, o.kind, rules))
               for o in observed)


def _leaves(a: Any, b: Any) -> int:
    """How many leaves of two trees differ (a structural difference counts one)."""
    if type(a) is dict and type(b) is dict:
        return sum(1 if k not in a or k not in b else _leaves(a[k], b[k])
                   for k in a.keys() | b.keys())
    if type(a) is list and type(b) is list and len(a) == len(b):
        return sum(_leaves(x, y) for x, y in zip(a, b, strict=True))
    return int(a != b)


def _unmasked(observed: Sequence[Observed], rules: Rules) -> int:
    return sum(_leaves(masked(o.a, o.kind, rules), masked(o.b, o.kind, rules))
               for o in observed)


def _prune(ch: _Chooser) -> None:
    """Drop rules the others make redundant (the last kept first)."""
    if len(ch.chosen) < 2:
        return
    target = _unmasked(ch.observed, ch.rules())
    for rule in list(reversed(ch.chosen)):
        rest = [r.text for r in ch.chosen if r is not rule]
        if _unmasked(ch.observed, Rules([*ch.base, *rest])) <= target:
            ch.chosen = [r for r in ch.chosen if r is not rule]


def _attribute(ch: _Chooser) -> None:
    """Each kept rule's evidence: every place it masks on its own, once the set is final."""
    for rule in ch.chosen:
        alone = Rules([rule.text])
        found: list[Evidence] = []
        for o in ch.observed:
            found += [(o.ref, d.where) for d in o.diffs if _masks(alone, o, d)]
        rule.explains = list(dict.fromkeys(found))


def _masks(rules: Rules, o: Observed, d: Difference) -> bool:
    if d.kind == SPAN:
        return any(_span_explained(rules, (o, d, sp)) for sp in d.spans)
    return d.kind == FIELD and _field_explained(rules, (o, d, None))


def propose(observed: Sequence[Observed], check: Check, *, by_place: bool = True,
            base: Sequence[str] = ()) -> Proposal:
    """The rules for ``observed`` (see the module docstring); ``base``: rules in force."""
    ch = _Chooser(observed, check, base)
    _spans(ch)
    _fields(ch, by_place)
    _prune(ch)
    _attribute(ch)
    final = ch.rules()
    other = [(o.ref, d) for o in observed for d in o.diffs if d.kind not in (SPAN, FIELD)]
    seen = sum(len(d.spans) if d.kind == SPAN else 1 for o in observed for d in o.diffs
               if d.kind in (SPAN, FIELD))
    left = sum(len(_still(o, d, final)) for o in observed for d in o.diffs
               if d.kind in (SPAN, FIELD))
    empty = Rules(base)
    return Proposal(ch.chosen, ch.refused, other, len(observed),
                    residual(observed, empty), residual(observed, final), seen, seen - left)


def _still(o: Observed, d: Difference, rules: Rules) -> list[object]:
    """The volatile parts of ``d`` that ``rules`` leave keyed."""
    if d.kind == FIELD:
        return [] if _field_explained(rules, (o, d, None)) else [d]
    return [s for s in d.spans if not _span_explained(rules, (o, d, s))]

