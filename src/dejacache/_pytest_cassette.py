"""The pytest plugin's cassette machinery: the ``dejacache_cassette`` fixture's block, the
report pages and the summary's counts (``pytest_plugin.py`` is the entry point; this is loaded
by the first test that uses a cassette, so a run that uses none never imports it)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from . import _project, _pytest_vcr
from . import _pytest_state as state
from ._core.counts import counted
from ._lazy import pattern
from .cassettes import scratch
from .cassettes._events import INTERRUPTIONS
from .cassettes.block import cassette, in_ci
from .cassettes.netguard import NetworkGuard
from .cassettes.store import Cassette, TapeCounters, summarize

if TYPE_CHECKING:  # a partial replay's record loads with the first partial block
    from .cassettes.partial import Partial

__all__ = ["counts", "live_summary", "open_cassette", "placeholder_advice", "show_misses",
           "summary_counts", "worker_numbers"]

_UNSAFE = pattern(r"[^A-Za-z0-9._-]+")  # --dejacache-report pages only


# The placeholder keys and the price table's date load only where a test needs them: a block
# that does not replay in a session that does (a test process's usual case) supplies none,
# and a run whose hits cost nothing names no prices (two modules, 28 KB of bytecode).
def _supply() -> list[str] | None:
    from .cassettes import placeholder_keys

    return placeholder_keys.supply()


def _withdraw(keys: list[str] | None) -> None:
    if keys is not None:
        from .cassettes import placeholder_keys

        placeholder_keys.withdraw(keys)


def _prices_date() -> str:
    from .cassettes.prices import PRICES_DATE

    return PRICES_DATE


def open_cassette(request: pytest.FixtureRequest, path: pathlib.Path, opts: dict[str, Any],
                  *, shared: bool) -> Iterator[Cassette]:
    """The body of ``pytest_plugin.open_cassette`` (the ``dejacache_cassette`` fixture's, and
    the ``vcr`` fixture's for ``@pytest.mark.vcr``); ``opts`` are the marker's options."""
    item = request.node
    config = request.config
    mode = opts.get("mode") or config.getoption("dejacache_mode") or _pytest_vcr.fallback_mode(
        config, path.exists())
    hint = state.rerecord_command(item)
    if scratch.active():
        mode = "record"  # `dejacache learn`: every call live, into its scratch directory
    from_option = "live" not in opts
    live = opts.get("live", config.getoption("dejacache_live") or _project.current().get(
        "live"))
    partial = bool(live) or opts.get("replay_until") is not None
    if partial and mode == "record":
        mode = None  # a partial block replays; --dejacache-mode=record is for the others
    # A test replaying in a session that does not (a marker's mode="replay"): its own
    # placeholders, set before the block patches the transports so the guard sits under it.
    # (Not for a partial replay: its live calls need the real credentials.)
    keys = _supply() if (
        mode == "replay" and not partial and not state.placeholders_out(config)) else None
    block = cassette(
        path,
        mode,
        redact=opts.get("redact"),
        substitute=opts.get("substitute"),
        record_on_error=bool(opts.get("record_on_error", False)),
        record_errors=tuple(opts.get("record_errors", ())),
        prune=bool(opts.get("prune", False) or config.getoption("dejacache_prune")),
        volatile=opts.get("volatile", ()),
        strict=bool(opts.get("strict", False) or config.getoption("dejacache_strict")),
        rerecord_hint=hint,
        shared=shared,
        match=opts.get("match", "request"),
        max_age=opts.get("max_age"),
        on_expiry=opts.get("on_expiry"),
        live=live,
        replay_until=opts.get("replay_until"),
        live_path=opts.get("live_path"),
        **({"cache_key": opts["cache_key"]} if "cache_key" in opts else {}),
    )
    if live and from_option:
        # --dejacache-live is every test's: a pattern no call of this test matched may match
        # another's; the session says which matched none (``live_summary``).
        block.on_live = lambda p: config.stash.setdefault(state.LIVE_SEEN, []).append(p)
    try:
        tape = block.__enter__()
    except BaseException:
        _withdraw(keys)
        raise
    config.stash[state.TAPES].append((item.nodeid, tape))
    item.stash[state.TAPE] = tape
    guard: NetworkGuard | None = None
    try:  # (from here: a Ctrl-C landing before the test runs still closes the block)
        if tape.mode == "replay" and (in_ci() or config.getoption("dejacache_block_network")):
            allow = [*(_project.current().get("allow_hosts") or ()),
                     *opts.get("allow_hosts", ())]
            guard = NetworkGuard(
                lambda where: (f"Test {item.nodeid} replays from cassette {path}; to record "
                               f"this call run locally: {hint} (or allow the host with "
                               "@pytest.mark.dejacache(allow_hosts=[...]))."),
                allow=allow,
            )
            guard.__enter__()
        yield tape
    finally:
        if guard is not None:
            guard.__exit__(None, None, None)
        # A test that did not pass writes nothing (a skipped one neither prunes: it stopped
        # before the calls it did not make, which are not unused).
        ending = state.ending(item)
        block.discard_reason = state.outcome(item)
        try:
            block.__exit__(ending, None, None)  # (not None: the old cassette stays as it was)
        finally:
            _withdraw(keys)
    if ending is not None and issubclass(ending, INTERRUPTIONS):
        return  # the session is stopping: no report page, no verdict on a test cut short
    report_dir = config.getoption("dejacache_report")
    if report_dir and path.exists():
        _write_report(pathlib.Path(report_dir), item, path, tape)
    if ending is None and tape.misses and not opts.get("expect_misses", False):
        # The code under test caught the miss (a broad ``except``, an SDK error handler,
        # a framework's fallback) and the test passed on a path the recording never took.
        pytest.fail(f"{len(tape.misses)} replay miss(es) in cassette {path} were caught "
                    "by the code under test, so this test passed without its recording "
                    "(a test that asserts misses says so with "
                    "@pytest.mark.dejacache(expect_misses=True)):\n\n"
                    + "\n\n".join(str(m) for m in tape.misses[:3]), pytrace=False)


def _write_report(directory: pathlib.Path, item: pytest.Item, path: pathlib.Path,
                  tape: Cassette) -> None:
    """``--dejacache-report DIR``: the test's run as a page (what it replayed, recorded and
    left unused), named after the test."""
    from .report import report

    directory.mkdir(parents=True, exist_ok=True)
    name = _UNSAFE.sub("_", item.nodeid).strip("._")[:150] or "test"
    (directory / f"{name}.html").write_text(report(path, calls=tape.calls), encoding="utf-8")


# ---------------------------------------------------------------- the summary


def counts(tapes: list[tuple[str, Cassette]]) -> dict[str, Any]:
    total = summarize(t for _, t in tapes)
    # A shared cassette holds other tests' entries: one test's unused ones are not unused
    # (and --dejacache-prune leaves a shared file alone). A pruned tape has none left.
    unused = [(nodeid, str(t.path), len(t.unused)) for nodeid, t in tapes
              if not t.shared and not t.pruned]
    return {"counters": total, "unused": [u for u in unused if u[2]],
            "pruned": [(nodeid, str(t.path), t.pruned) for nodeid, t in tapes if t.pruned]}


def worker_numbers(tapes: list[tuple[str, Cassette]]) -> dict[str, Any]:
    """An xdist worker's counts, for the controller's summary."""
    c = counts(tapes)
    ctr: TapeCounters = c["counters"]
    return {"replayed": ctr.replayed, "recorded": ctr.recorded, "missed": ctr.missed,
            "time_saved": ctr.time_saved, "tokens_saved": ctr.tokens_saved,
            "dollars_saved": ctr.dollars_saved, "unused": c["unused"], "pruned": c["pruned"]}


def summary_counts(tr: Any, tapes: list[tuple[str, Cassette]], remote: list[dict[str, Any]],
                   pruning: bool) -> None:
    c = counts(tapes)
    total: TapeCounters = c["counters"]
    unused: list[Any] = list(c["unused"])
    pruned: list[Any] = list(c["pruned"])
    for r in remote:
        total.replayed += r["replayed"]
        total.recorded += r["recorded"]
        total.missed += r["missed"]
        total.time_saved += r["time_saved"]
        total.tokens_saved += r["tokens_saved"]
        total.dollars_saved += r["dollars_saved"]
        unused.extend(tuple(u) for u in r["unused"])
        pruned.extend(tuple(u) for u in r.get("pruned", ()))
    tr.write_line(
        f"calls: {total.replayed} replayed, {total.recorded} recorded, {total.missed} missed "
        f"({counted(len(tapes), 'cassette use') if tapes else 'xdist cassette uses'})"
    )
    if total.replayed:  # (a run that only recorded saved nothing: no line, no price note)
        priced = (f", ~${total.dollars_saved:.2f} (prices as of {_prices_date()}; override "
                  "with the dejacache_prices ini option)") if total.dollars_saved else ""
        tr.write_line(f"replay saved: {total.time_saved:.1f} s of model time, "
                      f"{total.tokens_saved:,} tokens{priced}")
    if unused:
        n = sum(u[2] for u in unused)
        how = ("kept although --dejacache-prune was given: a test that does not pass "
               "prunes nothing" if pruning else "remove them with --dejacache-prune")
        tr.write_line(f"unused entries: {n} in {counted(len(unused), 'cassette')} ({how}):")
        for nodeid, path, k in unused[:10]:
            tr.write_line(f"  {k:>4}  {path}  ({nodeid})")
        if len(unused) > 10:
            tr.write_line(f"  ... and {len(unused) - 10} more")
    if pruned:  # --dejacache-prune (or the marker's prune=True) removed them: done
        n = sum(u[2] for u in pruned)
        tr.write_line(f"pruned: {counted(n, 'unused entry', 'unused entries')} removed "
                      f"from {counted(len(pruned), 'cassette')}")


def live_summary(parts: list[Partial]) -> str | None:
    """The note on ``--dejacache-live`` patterns that matched no call of the whole session."""
    from .cassettes.partial import unmatched_note

    if not parts:
        return None
    rules = parts[0].rules
    unmatched = [r for r in rules if not any(r in p.matched for p in parts)]
    if not unmatched:
        return None
    calls: dict[tuple[str, str], None] = {}
    for p in parts:
        calls.update(p.calls)
    return unmatched_note(unmatched, calls, f"in the {counted(len(parts), 'cassette test')} "
                          "of this session (--dejacache-live)")


# ---------------------------------------------------------------- advice for a refused call


def placeholder_advice(item: pytest.Item, host: str, keys: str) -> str | None:
    """What the placeholder guard tells a test whose call it refused (``keys``: the
    variables to set): whether the test has a cassette at all, and whether the call went
    live on purpose."""
    tape: Cassette | None = item.stash.get(state.TAPE, None)
    if tape is None:
        from .scope import current

        eff = current()
        if eff.test_facing and eff.source:
            return (f"Test {item.nodeid}: this call to {host} was not in {eff.source}, so it "
                    f"went live; set {keys} and record it locally.")
        return (f"Test {item.nodeid} has no cassette, so nothing could replay this call and "
                f"it went to the network. Give it one: take the dejacache_cassette fixture "
                f"or mark it @pytest.mark.dejacache (a whole module: pytestmark = "
                f"pytest.mark.dejacache), run it once locally with the real key to record "
                f"it, and commit the cassette. To call {host} live in this run instead, set "
                f"{keys}.")
    if tape.partial is not None:
        return (f"Test {item.nodeid} sends this call live on purpose "
                f"({tape.partial.describe()}), so it needs the real key: set {keys}.")
    return (f"Test {item.nodeid}: this call to {host} was not in its cassette {tape.path}, "
            f"so it went live (mode {tape.mode}); set {keys} and re-record locally: "
            f"{state.rerecord_command(item)}")


def show_misses(rep: pytest.TestReport, tape: Cassette) -> None:
    # An SDK, litellm or scenario that wraps the miss leaves a one-line "Connection error"
    # on top and the explanation thousands of lines up: put the explanation first.
    head = [f"dejacache: this test failed after {len(tape.misses)} replay miss(es) in "
            f"cassette {tape.path}; the failure below wraps it.", ""]
    for miss in tape.misses[:5]:
        head += [str(miss), ""]
    if len(tape.misses) > 5:
        head.append(f"... and {len(tape.misses) - 5} more misses")
    rep.longrepr = "\n".join(head) + "\n---- the failure as raised ----\n" + str(rep.longrepr)

