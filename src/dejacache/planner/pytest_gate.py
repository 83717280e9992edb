"""The prompt-cache gate in pytest (the plugin declares its options and calls ``configure``
when a bar is set: a run without one does not load this module).

``--dejacache-min-hit-rate RATE`` (or the ini ``dejacache_min_hit_rate``): after the run, the
cassettes the session's tests opened are planned, and a conversation whose predicted hit rate
is below ``RATE``, or (with ``--dejacache-hit-rate-baseline PATH``) below the same
conversation's in the baseline recordings by more than ``--dejacache-hit-rate-drop`` (0.05),
fails the run: exit status 1, and the terminal summary names the conversation, the turn and
the span that broke the cache, as ``dejacache prompt-cache check`` does. The prediction reads
the requests alone, so a prompt change that breaks the provider's cache fails the pull
request that re-records its cassettes, before it costs anything in production.

Under pytest-xdist each worker hands the files it opened to the controller, which checks them.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

__all__ = ["configure"]

_GATE: pytest.StashKey[_Gate] = pytest.StashKey()


def configure(config: pytest.Config) -> None:
    """Register the gate when a bar is set."""
    rate = config.getoption("dejacache_min_hit_rate")
    if rate is None and config.getini("dejacache_min_hit_rate"):
        try:
            rate = float(config.getini("dejacache_min_hit_rate"))
        except ValueError:
            raise pytest.UsageError("dejacache_min_hit_rate: a fraction such as 0.7, not "
                                    f"{config.getini('dejacache_min_hit_rate')!r}") from None
    if rate is None:
        return
    drop = config.getoption("dejacache_hit_rate_drop")
    for name, value in (("--dejacache-min-hit-rate", rate), ("--dejacache-hit-rate-drop", drop)):
        if not 0.0 <= value <= 1.0:
            raise pytest.UsageError(f"{name}: a fraction between 0 and 1, not {value}")
    baseline = config.getoption("dejacache_hit_rate_baseline")
    if baseline is not None and not pathlib.Path(baseline).exists():
        # Found missing only after the run, it was an INTERNALERROR with the suite's result lost.
        raise pytest.UsageError(f"--dejacache-hit-rate-baseline: no such file or directory: "
                                f"{baseline}")
    gate = _Gate(rate, baseline, drop)
    config.stash[_GATE] = gate
    config.pluginmanager.register(gate, f"dejacache-prompt-cache-gate-{id(gate)}")


class _Gate:
    def __init__(self, rate: float, baseline: str | None, drop: float) -> None:
        from ..cassettes import block

        self.rate, self.baseline, self.drop = rate, baseline, drop
        self.paths: set[str] = set()
        self.lines: list[str] = []
        self._hook = self._opened
        block.OPENED.append(self._hook)

    def _opened(self, blk: Any, tape: Any) -> None:
        self.paths.add(str(tape.path))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        config = session.config
        worker = getattr(config, "workeroutput", None)
        if worker is not None:  # an xdist worker: the controller checks
            worker["dejacache_prompt_cache"] = sorted(self.paths)
            return
        files = sorted(p for p in self.paths if pathlib.Path(p).is_file())
        if not files:
            return
        self.lines, failed = _check(files, self.rate, self.baseline, self.drop)
        if failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.paths.update(getattr(node, "workeroutput", {}).get("dejacache_prompt_cache", ()))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.lines:
            terminalreporter.section("dejacache prompt cache")
            for line in self.lines:
                terminalreporter.write_line(line)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        from ..cassettes import block

        if self._hook in block.OPENED:
            block.OPENED.remove(self._hook)


def _check(files: list[str], rate: float, baseline: str | None, drop: float
           ) -> tuple[list[str], bool]:
    from .._core.cache_gate import check
    from .._core.cache_plan import plan
    from ..cassettes.prices import rates_from_table
    from .load import accounts
    from .recordings import plan_recordings
    from .report import verdict_lines

    found = [a for f in files for a in accounts(f)]
    current = plan(found, rates_from_table())
    base = plan_recordings(baseline) if baseline else None
    verdicts = check(current, rate, base, drop)
    head = (f"predicted prompt-cache hit rates of {len(files)} cassette(s), bar {rate:.0%}"
            + (f", baseline {baseline}" if baseline else ""))
    return [head, *verdict_lines(verdicts)], any(not v.ok for v in verdicts)
