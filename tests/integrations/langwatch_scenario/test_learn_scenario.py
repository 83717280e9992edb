"""``dejacache learn`` on a langwatch-scenario run recorded by its test's own cassette: the
judge's prompt carries the run's OpenTelemetry digest (timestamps, span and trace ids,
durations, epoch milliseconds), so the run misses in replay until learn finds the rules
(runs in ``.venv-scenario``; the project is a throwaway copy run in subprocesses)."""

from __future__ import annotations

import pathlib
import re

import pytest

pytest.importorskip("scenario")

from learn_support import counts, entries, make_project, run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def test_learn_makes_a_scenario_run_with_a_fresh_trace_digest_replay(
        tmp_path: pathlib.Path) -> None:
    proj = make_project(tmp_path, scenario=True)
    assert run(proj, "pytest", "--dejacache-mode=record", "tests", timeout=600,
               **ENV).returncode == 0
    total = entries(proj)
    # (No replay run before learning: each run imports langwatch-scenario, ~20 s of CPU, and
    # learn's own two runs say how many calls missed without the rules.)
    learned = run(proj, "dejacache", "learn", "--write", "tests", "-q", timeout=1200, **ENV)
    assert learned.returncode == 0, learned.stdout[-3000:] + learned.stderr[-2000:]
    assert "answered differently" not in learned.stdout  # no candidate merged two calls
    alike = re.search(r"calls keyed alike in both runs: (\d+) of (\d+) without new rules, "
                      r"(\d+) of (\d+) with them", learned.stdout)
    assert alike is not None, learned.stdout[-3000:]
    without, of, with_rules, of_again = map(int, alike.groups())
    assert of == of_again == total and without < total == with_rules  # the digest missed
    after = run(proj, "pytest", "--dejacache-mode=replay", "tests", timeout=600, **ENV)
    assert after.returncode == 0, after.stdout[-3000:]
    assert counts(after.stdout) == (total, 0, 0)
