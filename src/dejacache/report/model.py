"""What the HTML report shows, read from recordings: runs of steps, and the drift between two.

The page renders these small dataclasses only. They are filled from the trajectory API
(:func:`dejacache.load_cassette`, :func:`dejacache.diff_cassettes`), so the page, ``dejacache
show`` / ``diff`` and a user's own scripts agree on what a step, a token, a cost and a change
is; each model call also gets the prompt-prefix verdict of the same per-session accounting as
``dejacache prefix-report``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Iterable
from typing import Any

from .._core.ageing import age_text, recorded_at
from ..cassettes.expiry import age_line

__all__ = ["Drift", "PrefixTurn", "Run", "Step", "apply_calls", "diff_runs", "load_run"]


@dataclasses.dataclass(frozen=True, slots=True)
class PrefixTurn:
    """Prompt-prefix reuse of one model call (its conversation's previous turn vs this one)."""

    session: str
    turn: int
    prompt_tokens: int
    expected_cached: int  # what an unchanged prefix lets the provider serve from its cache
    reported_cached: int | None  # what the provider says it served
    breaks: tuple[str, ...]  # one line per break: reason, where, tokens, cost
    hazards: tuple[str, ...] = ()  # one line per hazard found on this turn: kind, where, text


@dataclasses.dataclass(slots=True)
class Step:
    index: int  # place in the run, from 0 (as ``dejacache show`` and the trajectory API)
    name: str
    kind: str  # model | tool | function | http
    request: Any  # as on disk: redacted
    response: Any
    error: Any
    input_tokens: int
    output_tokens: int
    tokens_exact: bool  # False: the recording carried no usage
    # Whether totals count its tokens: ``trajectory.Step.counted``'s verdict, taken as it is
    # (the page's totals are the trajectory's, by one rule).
    counted: bool
    duration: float
    cost: float
    model: str = ""
    state: str = "recorded"  # recorded | replayed | unused (the last two: from a run's calls)
    prefix: PrefixTurn | None = None
    key: str = ""
    age: str = ""  # "45d" ("unknown": recorded before dejacache kept the time)
    recorded: str = ""  # when and with which SDK / model (``cassettes/ageing.py``)

    @property
    def label(self) -> str:
        return f"#{self.index} {self.name}"


@dataclasses.dataclass(slots=True)
class Missed:
    """A call replay had no recording for: the request as it was made, and the recorded
    call of the same name it differs least from (``None``: none of that name)."""

    label: str
    request: Any
    nearest: str | None = None
    diff: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(slots=True)
class Run:
    title: str
    path: str
    steps: list[Step]
    problem: str | None = None  # why replay would refuse the file (damaged, hand-edited)
    view: Any = None  # the trajectory view it was read from (CassetteView)
    missed: list[Missed] = dataclasses.field(default_factory=list)  # replay had no answer
    outcomes: bool = False  # states come from a run's calls, not only from the file

    @property
    def input_tokens(self) -> int:
        return sum(s.input_tokens for s in self.steps if s.counted)

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.steps if s.counted)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def cost(self) -> float:
        return sum(s.cost for s in self.steps)

    @property
    def duration(self) -> float:
        return sum(s.duration for s in self.steps)

    def count(self, kind: str) -> int:
        return sum(1 for s in self.steps if s.kind == kind)


@dataclasses.dataclass(slots=True)
class Drift:
    a: Run
    b: Run
    added: list[Step] = dataclasses.field(default_factory=list)
    dropped: list[Step] = dataclasses.field(default_factory=list)
    changed: list[tuple[Step, Step, list[str]]] = dataclasses.field(default_factory=list)
    same: int = 0
    reordered: list[tuple[Step, Step]] = dataclasses.field(default_factory=list)

    @property
    def token_delta(self) -> int:
        return self.b.tokens - self.a.tokens

    @property
    def cost_delta(self) -> float:
        return self.b.cost - self.a.cost

    @property
    def duration_delta(self) -> float:
        return self.b.duration - self.a.duration

    @property
    def identical(self) -> bool:
        return not (self.added or self.dropped or self.changed)


# ---------------------------------------------------------------- reading


def _step(s: Any, now: float) -> Step:
    """A trajectory step as the page shows it (numbered from 0, as ``dejacache show``)."""
    entry = s.stored
    return Step(
        index=s.index, name=s.name, kind=s.kind, request=s.request, response=s.response,
        error=s.error, input_tokens=s.input_tokens, output_tokens=s.output_tokens,
        tokens_exact=s.tokens_exact, counted=s.counted, duration=s.duration, cost=s.cost,
        model=s.model,
        state=s.outcome or "recorded",  # a file does not say what a run replayed
        key=s.key, age=age_text(recorded_at(entry), now), recorded=age_line(entry, now),
    )


def apply_calls(run: Run, calls: Iterable[Any]) -> None:
    """Mark each step with what a block's run did with it (``tape.calls``): ``replayed``,
    ``recorded`` (run live and stored), or ``unused``; calls replay missed are listed."""
    run.outcomes = True
    for step in run.steps:
        step.state = "unused"
    claimed: set[int] = set()
    recorded = []
    for call in calls:
        if call.outcome == "missed":
            run.missed.append(_missed(run, call))
        elif call.recorded_step is not None and 0 <= call.recorded_step < len(run.steps):
            run.steps[call.recorded_step].state = call.outcome
            claimed.add(call.recorded_step)
        elif call.outcome == "recorded":
            recorded.append(call)
    for call in recorded:  # stored by this run: the first unclaimed step under its key
        for step in run.steps:
            if step.index not in claimed and step.key == call.key:
                step.state = "recorded"
                claimed.add(step.index)
                break


def _missed(run: Run, call: Any) -> Missed:
    """What a failed run's page shows of a miss: the request, and its differences from the
    nearest recorded call of that name (as the ``ReplayMiss`` message gives them)."""
    from .._core.diff import nearest

    label = f"#{call.index} {call.name} (key {call.key})"
    try:
        request = call.request
    except Exception:  # a request that cannot be read back: still named
        request = None
    same = [(str(s.index), s.request) for s in run.steps if s.name == call.name]
    found = nearest(request, same) if request is not None and same else None
    if found is None:
        return Missed(label, request)
    index, _, diff = found
    return Missed(label, request, f"#{index}", diff)


def load_run(path: str | pathlib.Path, *, title: str | None = None) -> Run:
    """A cassette file as a run: its steps in file order (the order they were made)."""
    from ..cassettes.trajectory import load_cassette

    p = pathlib.Path(path)
    view = load_cassette(p, verify=False)  # a damaged file is shown, with the warning
    now = time.time()
    run = Run(title or p.name, str(p), [_step(s, now) for s in view.steps], view.problem)
    run.view = view
    _add_prefix_turns(run)
    return run


def _add_prefix_turns(run: Run) -> None:
    """Each model call's prompt-prefix verdict, as ``dejacache prefix-report`` computes it."""
    from .._core.prefix import api_of, build_prefix
    from .._core.prompt_cache import SessionState, read_usage
    from ..cassettes import prefix_report as pr
    from ..cassettes.prices import rates_from_table

    rates = rates_from_table()
    # prefix-report's session inference (a request continues the conversation it shares the
    # most leading messages with), so the page and the command agree turn for turn.
    tape = pr.SessionInference(pathlib.Path(run.path).name, per_cassette=False)
    states: dict[str, SessionState] = {}
    for step in run.steps:
        req = step.request
        body = req.get("body") if isinstance(req, dict) else None
        if step.kind != "model" or step.error is not None or not isinstance(body, dict):
            continue
        resp = step.response
        if isinstance(resp, dict) and int(resp.get("status", 200)) >= 400:
            continue
        provider = step.name.partition(".")[0]
        api = api_of(provider, body, step.name)
        if api is None or pr.PROVIDER_OF_API.get(api) != provider:
            continue
        prefix = build_prefix(api, body)
        session = tape.session_for(step.name, prefix)
        state = states.setdefault(session, SessionState(session))
        record, found, hazards = state.turn(prefix, read_usage(pr.stored_usage(resp)), None, rates)
        step.prefix = PrefixTurn(
            session, record.turn, record.prompt_tokens, record.expected_cached,
            record.reported_cached,
            tuple(f"{b.reason}: {('`' + b.path + '` ') if b.path else ''}"
                  f"{b.before} → {b.after} ({b.tokens:,} tokens, ${b.cost:.4f})"
                  for b in found),
            tuple(f"{h.kind}: {('`' + h.path + '` ') if h.path else ''}{h.text}"
                  for h in hazards))


# ---------------------------------------------------------------- drift


def diff_runs(a: Run, b: Run) -> Drift:
    """:func:`dejacache.diff_cassettes` of two runs: steps paired by identical request, then
    by name in order; provider-regenerated ids, headers and timestamps are not changes."""
    from ..cassettes.trajectory import diff_cassettes

    if a.view is None or b.view is None:
        raise ValueError("diff_runs needs runs read by load_run")
    d = diff_cassettes(a.view, b.view)
    out = Drift(a, b, same=d.unchanged)
    out.added = [b.steps[s.index] for s in d.new_calls]
    out.dropped = [a.steps[s.index] for s in d.dropped_calls]
    out.changed = [(a.steps[c.before.index], b.steps[c.after.index], list(c.changes))
                   for c in d.changed_calls]
    out.reordered = [(a.steps[x.index], b.steps[y.index]) for x, y in d.reordered_calls]
    return out
