"""The recordings ``dejacache learn`` reads: two runs of the same tests, paired call by call,
and the project's own cassettes, which every rule is checked against.

Calls of one cassette are paired by name and order (the n-th call of ``openai.chat.
completions`` in one run with the n-th in the other). Before the second run's request is
compared it is translated (``echo.py``): what it quotes of the answers its run received
before reads as the first run's answers did.

:meth:`Recordings.check` is the false-rule check: under the rules, no two calls of one
recording (either run, or a cassette of the project) that were keyed apart and answered
differently may share a key, and no call of the second run may key like a call of the first
run other than its own counterpart.
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
from collections.abc import Iterable, Iterator
from typing import Any

from ..cassettes.trajectory import CassetteView, load_cassette
from ..errors import CassetteError
from .answers import answer_of, first_merge
from .diffs import FIELD, QUOTED, SPAN, Difference, at, differences
from .echo import Echoes
from .masking import Rules, canonical, masked
from .rules import CallRef, Observed

__all__ = ["Call", "Recordings", "calls_of", "observe"]


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One recorded call: where it is, how it was keyed, what it asked and got."""

    ref: CallRef
    namespace: str
    kind: str
    key: str
    request: Any
    answer: bytes  #: the answer as "same answer" compares it

    @property
    def group(self) -> tuple[str, str]:
        return self.namespace, self.ref.name


def _answer(step: Any) -> tuple[Any, bytes]:
    return answer_of(step.response, step.error)


def calls_of(view: CassetteView, label: str) -> list[tuple[Call, Any]]:
    """The calls of a cassette, each with its recorded answer."""
    out = []
    for step in view.steps:
        value, answer = _answer(step)
        out.append((Call(CallRef(label, step.index, step.name), step.namespace, step.raw_kind,
                         step.key, step.request, answer), value))
    return out


def _pairs(a: list[tuple[Call, Any]], b: list[tuple[Call, Any]]
           ) -> Iterator[tuple[tuple[Call, Any], tuple[Call, Any]]]:
    """The n-th call of each name in ``a`` with the n-th of that name in ``b``."""
    queue: dict[tuple[str, str], collections.deque[tuple[Call, Any]]] = \
        collections.defaultdict(collections.deque)
    for item in b:
        queue[item[0].group].append(item)
    for item in a:
        q = queue.get(item[0].group)
        if q:
            yield item, q.popleft()


def observe(a: list[tuple[Call, Any]], b: list[tuple[Call, Any]]
            ) -> tuple[list[Observed], list[tuple[Call, Call, Any]], int]:
    """The paired calls of one cassette's two runs: what differs, the pairs with the second
    request translated, and how many quoted answers were translated."""
    echoes = Echoes()
    observed: list[Observed] = []
    pairs: list[tuple[Call, Call, Any]] = []
    for (ca, va), (cb, vb) in _pairs(a, b):
        tb = echoes.translate(cb.request, ca.request)
        observed.append(Observed(ca.ref, ca.kind, ca.request, tb,
                                 _chosen(differences(ca.request, tb), echoes)))
        pairs.append((ca, cb, tb))
        echoes.learn(va, vb)  # later requests may quote this answer
    return observed, pairs, echoes.used


# Shapes a model can pick out of what it was told (ids, numbers) besides plain values; a
# clock, a temp directory or a port comes from the machine the test runs on.
_CHOSEN_SHAPES = frozenset({"UUID", "hex nonce", "base64 nonce", "random token", "number"})


def _choosable(shape: Any) -> bool:
    return shape is None or shape.name in _CHOSEN_SHAPES


def _chosen(diffs: list[Difference], echoes: Echoes) -> list[Difference]:
    """``diffs`` with the values each run took from its own earlier answers marked
    ``quoted``: a rule must not mask them (see ``echo.py``)."""
    out = []
    for d in diffs:
        if d.kind == FIELD and _choosable(d.shape) and echoes.quoted(d.a, d.b):
            out.append(dataclasses.replace(d, kind=QUOTED))
        elif d.kind == SPAN:
            rest = tuple(s for s in d.spans if not (
                _choosable(s.shape) and echoes.quoted(s.a_text, s.b_text)))
            if rest:
                out.append(dataclasses.replace(d, spans=rest))
            if len(rest) < len(d.spans):
                out.append(dataclasses.replace(d, kind=QUOTED, spans=tuple(
                    s for s in d.spans if s not in rest)))
        else:
            out.append(d)
    return out


def _load(path: pathlib.Path, label: str) -> list[tuple[Call, Any]] | None:
    try:
        return calls_of(load_cassette(path), label)
    except CassetteError:
        return None


@dataclasses.dataclass(slots=True)
class Recordings:
    """What one ``learn`` compared, and everything its rules are checked against."""

    observed: list[Observed] = dataclasses.field(default_factory=list)
    #: per cassette: its first run's calls and the pairs (second run translated)
    paired: list[tuple[list[Call], list[tuple[Call, Call, Any]]]] = \
        dataclasses.field(default_factory=list)
    #: recordings checked for merged calls: each run's cassettes, the project's cassettes
    files: list[list[Call]] = dataclasses.field(default_factory=list)
    echoes: int = 0
    only_one_run: list[str] = dataclasses.field(default_factory=list)
    unreadable: list[str] = dataclasses.field(default_factory=list)

    def add_runs(self, label: str, first: pathlib.Path | None, second: pathlib.Path | None
                 ) -> None:
        """One cassette as each run recorded it (None: that run did not write it)."""
        if first is None or second is None:
            self.only_one_run.append(label)
            return
        a, b = _load(first, label), _load(second, label)
        if a is None or b is None:
            self.unreadable.append(label)
            return
        observed, pairs, used = observe(a, b)
        self.observed += observed
        self.paired.append(([c for c, _ in a], pairs))
        self.files += [[c for c, _ in a], [c for c, _ in b]]
        self.echoes += used

    def add_existing(self, paths: Iterable[pathlib.Path], label: pathlib.Path) -> None:
        """The project's cassettes: a rule must not merge their calls either."""
        for p in paths:
            calls = _load(p, _shown(p, label))
            if calls:
                self.files.append([c for c, _ in calls])

    def check(self, rules: Rules) -> str | None:
        why = _masks_quoted(self.observed, rules)
        if why is not None:
            return why
        for calls in self.files:
            why = _merged(calls, rules)
            if why is not None:
                return why
        for first, pairs in self.paired:
            why = _crossed(first, pairs, rules)
            if why is not None:
                return why
        return None


def _shown(path: pathlib.Path, root: pathlib.Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _merged(calls: list[Call], rules: Rules) -> str | None:
    found = first_merge(((*c.group, canonical(masked(c.request, c.kind, rules))), c.key,
                         c.answer, c) for c in calls)
    if found is None:
        return None
    other, c = found
    return (f"it would give {other.ref} and #{c.ref.index} one key, and they were "
            "answered differently")


def _masks_quoted(observed: list[Observed], rules: Rules) -> str | None:
    for o in observed:
        quoted = [d for d in o.diffs if d.kind == QUOTED]
        if not quoted:
            continue
        a, b = masked(o.a, o.kind, rules), masked(o.b, o.kind, rules)
        for d in quoted:
            values = [(s.a_text, s.b_text) for s in d.spans] or [(d.a, d.b)]
            was_a, was_b, now_a, now_b = (at(t, d.path) for t in (o.a, o.b, a, b))
            if any(_hidden(was_a, now_a, va) or _hidden(was_b, now_b, vb)
                   for va, vb in values):
                return (f"it would mask {o.ref} {d.where}, a value each run took from its "
                        "earlier answers (what the model chose): calls choosing otherwise "
                        "would share a key")
    return None


def _hidden(before: Any, after: Any, value: Any) -> bool:
    """Whether masking took ``value`` (all of ``before``, or a part of a string) away."""
    if type(value) is str and type(before) is str:
        return type(after) is not str or after.count(value) < before.count(value)
    return bool(after != before)


def _crossed(first: list[Call], pairs: list[tuple[Call, Call, Any]], rules: Rules
             ) -> str | None:
    keyed: dict[tuple[str, str, bytes], set[int]] = collections.defaultdict(set)
    for c in first:
        keyed[(*c.group, canonical(masked(c.request, c.kind, rules)))].add(c.ref.index)
    for ca, cb, tb in pairs:
        hits = keyed.get((*cb.group, canonical(masked(tb, cb.kind, rules))))
        if hits and ca.ref.index not in hits:
            other = min(hits)
            return (f"the second run's {cb.ref} would replay the first run's #{other} "
                    f"instead of #{ca.ref.index}")
    return None
