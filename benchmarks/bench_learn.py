"""``dejacache learn`` measured: on agent suites whose prompts carry clocks, ids, temp paths,
ports, PIDs and nonces, how much of the volatile text the learned rules mask, how many rules
it writes, how many of them merge calls that were answered differently (the goal: none), and
the replay hit rate before and after.

Two suites, each copied into a throwaway project (``tests/learn_support.py``):

* **openai SDK agents** (``tests/_learn/suite``): the real openai SDK against the loopback
  provider and tool API of ``tests/http`` (fresh nonces and ids in every answer, quoted back
  in later requests). Each test notes the values it made volatile on purpose; a value counts
  as found when the learned rules mask it in the first learning run's recording. One test is
  a trap: two calls that differ only in an order's UUID, answered differently.
* **langwatch-scenario** (``.venv-scenario``): a scenario run recorded by its test's own
  cassette, so the judge's prompt carries the OpenTelemetry digest (timestamps, span and trace
  ids, durations, epoch milliseconds). The volatile spans are those a reference set of
  patterns for that digest finds in the first learning run's judge prompts.

For each: record the suite, replay it (hits before), ``dejacache learn --write``, replay it
again with fresh values (hits after). A hit rate is replayed calls over recorded calls (a test
stops at its first miss, so the calls after it count as missed). False rules are counted
independently of learn's own check: every pair of recorded calls (both learning runs and the
project's cassettes as recorded) that the rules give one key although their requests and
answers differed.

    .venv/bin/python benchmarks/bench_learn.py [--scenario-python PATH] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import shutil
import sys
import tempfile
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))

from _timing import write_json  # noqa: E402

import learn_support as ls  # noqa: E402
from dejacache._learn.masking import Rules, canonical, masked  # noqa: E402
from dejacache.cassettes.trajectory import load_cassette  # noqa: E402

# The scenario judge's digest, as a reader of it would list its volatile parts.
DIGEST = [re.compile(p) for p in (
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z",  # span start times
    r"(?<=\()\d+(?:\.\d+)?m?s(?=\))", r"(?<=Duration: )\d+(?:\.\d+)?m?s",  # durations
    r"(?<=\[)[0-9a-f]{8}(?=\])",  # span ids
    r"(?<=_at\\\": )1\d{12}|(?<=_at\": )1\d{12}",  # started_at / finished_at, ms
    r"(?<=trace_id\\\": \\\")[0-9a-f]{32}|(?<=trace_id\": \")[0-9a-f]{32}")]


def _steps(path: pathlib.Path) -> list[Any]:
    return list(load_cassette(path).steps)


def _cassettes(d: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in d.rglob("*.json") if ".dejacache" not in p.parts)


def _proposal(stdout: str) -> dict[str, Any]:
    at = stdout.rfind("\n{\n")
    doc, _ = json.JSONDecoder().raw_decode(stdout[at + 1:])
    return doc  # type: ignore[no-any-return]


def _false_rules(rules: Rules, files: list[pathlib.Path]) -> int:
    """Pairs of recorded calls of one file that the rules key alike although their requests
    and their answers differed (independent of learn's own check)."""
    bad = 0
    for f in files:
        groups: dict[tuple[str, bytes], dict[bytes, bytes]] = {}
        for s in _steps(f):
            answer = json.dumps(s.response if s.error is None else s.error, sort_keys=True,
                                default=str).encode()
            answer = re.sub(rb'"(date|x-request-id)", "[^"]*"', b"", answer)
            group = groups.setdefault((s.name, canonical(masked(s.request, s.raw_kind,
                                                                 rules))), {})
            group.setdefault(canonical(s.request), answer)
        for group in groups.values():
            answers = list(group.values())
            bad += sum(1 for i in range(len(answers)) for j in range(i)
                       if answers[i] != answers[j])
    return bad


def _truth_found(truth: pathlib.Path, run1: pathlib.Path, rules: Rules) -> tuple[int, int]:
    """(values the tests made volatile that appear in the first run's requests, those the
    rules mask)."""
    total = found = 0
    for line in truth.read_text().splitlines():
        note = json.loads(line)
        if not note["run"].endswith("run1"):
            continue
        test = note["test"].split("::")[-1]
        path = run1 / "tests" / "cassettes" / "test_suite" / f"{test}.json"
        steps = _steps(path) if path.exists() else []
        for value in note["values"]:
            quoted = json.dumps(value)[1:-1]
            seen = [s for s in steps if quoted in json.dumps(s.request)]
            if not seen:
                continue
            total += 1
            found += all(quoted not in json.dumps(masked(s.request, s.raw_kind, rules))
                         for s in seen)
    return total, found


def _digest_found(run1: pathlib.Path, rules: Rules) -> tuple[int, int]:
    total = left = 0
    for f in _cassettes(run1):
        for s in _steps(f):
            text = json.dumps(s.request)
            if "opentelemetry_traces" not in text:
                continue
            after = json.dumps(masked(s.request, s.raw_kind, rules))
            total += sum(len(p.findall(text)) for p in DIGEST)
            left += sum(len(p.findall(after)) for p in DIGEST)
    return total, total - left


def measure(name: str, where: pathlib.Path, python: str, scenario: bool) -> dict[str, Any]:
    proj = ls.make_project(where, scenario=scenario)
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    recorded = ls.run(proj, "pytest", "--dejacache-mode=record", "tests", python=python,
                      timeout=900, **env)
    assert recorded.returncode == 0, recorded.stdout[-3000:]
    calls = ls.entries(proj)
    as_recorded = where / "as-recorded"
    shutil.copytree(proj / "tests" / "cassettes", as_recorded)
    before = ls.counts(ls.run(proj, "pytest", "--dejacache-mode=replay", "tests",
                              python=python, timeout=900, **env).stdout)
    truth = where / "truth.jsonl"
    scratch = where / "scratch"
    learned = ls.run(proj, "dejacache", "learn", "--write", "--json", "--scratch",
                     str(scratch), "tests", "-q", python=python, timeout=1800,
                     LEARN_TRUTH=str(truth), **env)
    assert learned.returncode == 0, learned.stdout[-3000:] + learned.stderr[-3000:]
    doc = _proposal(learned.stdout)
    rules = Rules([r["rule"] for r in doc["rules"]])
    after_run = ls.run(proj, "pytest", "--dejacache-mode=replay", "tests", python=python,
                       timeout=900, **env)
    after = ls.counts(after_run.stdout)
    spans, found = (_digest_found(scratch / "run1", rules) if scenario
                    else _truth_found(truth, scratch / "run1", rules))
    files = [*_cassettes(scratch / "run1"), *_cassettes(scratch / "run2"),
             *_cassettes(as_recorded)]
    return {
        "suite": name, "calls": calls, "volatile_spans": spans, "found": found,
        "rules": len(doc["rules"]), "refused": len(doc["refused"]),
        "false_rules": _false_rules(rules, files),
        "hits_before": before[0], "hits_after": after[0],
        "tests_pass_after": after_run.returncode == 0,
        "rule_texts": [r["rule"] for r in doc["rules"]],
    }


def bench_learn(scenario_python: str | None = None, quick: bool = False) -> dict[str, Any]:
    """Both suites' figures (the scenario suite only when its venv exists)."""
    out: dict[str, Any] = {"suites": []}
    py = scenario_python or str(ROOT / ".venv-scenario" / "bin" / "python")
    runs = [("openai SDK agents", sys.executable, False)]
    if not quick and pathlib.Path(py).exists():
        runs.append(("langwatch-scenario judge", py, True))
    for name, python, scenario in runs:
        with tempfile.TemporaryDirectory(prefix="dejacache-bench-learn-") as tmp:
            out["suites"].append(measure(name, pathlib.Path(tmp), python, scenario))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario-python", default=None,
                    help="the python of .venv-scenario (default: <repo>/.venv-scenario)")
    ap.add_argument("--quick", action="store_true", help="the openai suite only")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    res = bench_learn(args.scenario_python, args.quick)
    write_json(args.json, "learn", {"available": True, "result": res}, quick=args.quick)
    import render

    print("## dejacache learn\n")
    print(render.block_learn({"learn": {"result": res, "date": "now"}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
