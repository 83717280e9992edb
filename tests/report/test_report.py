"""The HTML report: what the page says about a recorded run, and drift."""

from __future__ import annotations

import pathlib
import re

import pytest
from report_recordings import SECRET

from dejacache.cli import main
from dejacache.report import diff_runs, load_run, render_drift, render_runs, report


def test_a_run_lists_every_call_in_order_with_tokens_and_cost(run_a: pathlib.Path) -> None:
    run = load_run(run_a)
    assert [(s.index, s.name, s.kind) for s in run.steps] == [
        (0, "openai.chat.completions", "model"),
        (1, "tools.get_weather", "tool"),
        (2, "openai.chat.completions", "model"),
        (3, "anthropic.messages", "model"),
    ]
    first = run.steps[0]
    assert first.model == "gpt-4o-mini" and first.tokens_exact
    assert first.input_tokens > 0 and first.output_tokens > 0
    assert first.cost > 0                      # priced from the table (gpt-4o-mini)
    tool = run.steps[1]  # its result's size, estimated; the totals leave it to the model
    assert tool.input_tokens == 0 and tool.output_tokens > 0 and not tool.counted
    assert run.tokens == sum(s.input_tokens + s.output_tokens for s in run.steps
                             if s.kind == "model")
    assert run.duration == pytest.approx(sum(s.duration for s in run.steps))


def test_each_step_gives_its_age_and_the_sdk_and_model_it_was_recorded_with(
        run_a: pathlib.Path) -> None:
    import anthropic
    import openai

    run = load_run(run_a)
    assert all(re.fullmatch(r"\d+s", s.age) for s in run.steps)  # recorded just now
    assert f"with openai {openai.__version__}, model gpt-4o-mini" in run.steps[0].recorded
    assert f"with anthropic {anthropic.__version__}" in run.steps[3].recorded
    page = report(run_a)
    assert "<th class=\"num\">age</th>" in page
    assert f"openai {openai.__version__}" in page


def test_model_calls_carry_their_prompt_prefix_turn(run_a: pathlib.Path) -> None:
    run = load_run(run_a)
    chat = [s.prefix for s in run.steps if s.name == "openai.chat.completions"]
    assert [t.turn for t in chat if t is not None] == [1, 2]  # one conversation, two turns
    assert chat[1] is not None and chat[1].session == chat[0].session  # type: ignore[union-attr]


def test_the_page_shows_the_timeline_totals_and_bodies(run_a: pathlib.Path) -> None:
    page = report(run_a)
    run = load_run(run_a)
    for text in ("Timeline", "Prompt-prefix reuse per turn", "Requests and responses",
                 "tools.get_weather", "anthropic.messages", "gpt-4o-mini",
                 f"{run.input_tokens:,}", "recorded"):
        assert text in page
    assert page.count('<details class="step"') == 4


def test_the_page_is_self_contained(run_a: pathlib.Path) -> None:
    page = report(run_a)
    assert "<script" not in page.lower().replace("&lt;script", "")
    assert "<link" not in page
    # no resource from anywhere: every src/href is an in-page anchor
    assert all(v.startswith("#") for v in re.findall(r'(?:src|href)="([^"]*)"', page))
    assert "@import" not in page and "url(" not in page


def test_bodies_are_escaped_and_redacted_as_on_disk(run_a: pathlib.Path) -> None:
    page = report(run_a)
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert SECRET not in page
    assert SECRET not in run_a.read_text()


def test_a_directory_gives_one_section_per_cassette(run_a: pathlib.Path,
                                                    run_b: pathlib.Path) -> None:
    page = report(run_a.parent)
    assert page.count('<section class="run"') == 2
    assert 'href="#run-0"' in page and 'href="#run-1"' in page
    assert "2 recordings" in page


def test_drift_names_added_dropped_and_changed_calls(run_a: pathlib.Path,
                                                     run_b: pathlib.Path) -> None:
    d = diff_runs(load_run(run_a), load_run(run_b))
    assert [s.label for s in d.added] == ["#2 tools.get_hotels"]
    assert d.dropped == []
    changed = {old.label: lines for old, new, lines in d.changed}
    assert any("Porto" in line for line in changed["#1 tools.get_weather"])
    assert d.token_delta == load_run(run_b).tokens - load_run(run_a).tokens
    back = diff_runs(load_run(run_b), load_run(run_a))
    assert [s.label for s in back.dropped] == ["#2 tools.get_hotels"]
    # a dropped call is never also listed as changed ("#0" once was both)
    assert not {o.label for o, _, _ in back.changed} & {s.label for s in back.dropped}
    page = render_drift(d)
    for text in ("Added in B", "tools.get_hotels", "calls changed", "token delta"):
        assert text in page


def test_provider_regenerated_ids_are_not_drift(run_a: pathlib.Path) -> None:
    from dejacache.cassettes.rehash import rehash

    text = run_a.read_text()
    ids = sorted(set(re.findall(r'"((?:chatcmpl|msg)_?-?[0-9a-f]{12})"', text)))
    assert ids
    for i, old in enumerate(ids):  # a re-recording: same answers under fresh provider ids
        text = text.replace(old, old[:-12] + f"{i:012x}")
    fresh = run_a.with_name("again.json")
    fresh.write_bytes(rehash(text.encode(), fresh)[0])
    d = diff_runs(load_run(run_a), load_run(fresh))
    assert d.identical, d.changed
    assert "No drift" in render_drift(d)


def test_cli_writes_the_page(run_a: pathlib.Path, run_b: pathlib.Path,
                             tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    assert main(["report", str(run_a), "-o", str(out)]) == 0
    assert out.read_text().startswith("<!doctype html>")
    assert "wrote" in capsys.readouterr().out
    assert main(["report", str(run_a), str(run_b), "-o", str(out)]) == 0
    assert "drift report" in out.read_text()
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_cli_makes_the_pages_directory_and_names_a_place_it_cannot_write(
        run_a: pathlib.Path, tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "reports" / "run.html"  # a directory not made yet: was a traceback
    assert main(["report", str(run_a), "-o", str(out)]) == 0
    assert out.read_text().startswith("<!doctype html>")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["report", str(run_a), "-o", str(blocker / "run.html")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"dejacache report: cannot write {blocker / 'run.html'}: ")
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_an_empty_directory_says_so(tmp_path: pathlib.Path) -> None:
    assert "No cassettes found" in render_runs([])
    assert "No cassettes found" in report(tmp_path)


def test_a_blocks_calls_mark_each_step_replayed_recorded_or_unused(
        run_a: pathlib.Path, loopback: object) -> None:
    import openai

    import dejacache

    client = openai.OpenAI(base_url=loopback.openai_url,  # type: ignore[attr-defined]
                           api_key="sk-x", max_retries=0)
    first = load_run(run_a).steps[0]
    with dejacache.cassette(run_a, "auto") as tape:
        # step #0 again (replayed), then a new question (recorded); the rest goes unused
        client.chat.completions.create(**first.request["body"])
        client.chat.completions.create(model="gpt-4o-mini",
                                       messages=[{"role": "user", "content": "new"}])
    page = report(run_a, calls=tape.calls)
    states = re.findall(r'<span class="state (\w+)">', page)
    assert states == ["replayed", "unused", "unused", "unused", "recorded"]
    assert "replayed · recorded · unused" in page


def test_the_pytest_option_writes_a_page_per_cassette_test(
        pytester: pytest.Pytester, loopback: object, tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.openai_url)  # type: ignore[attr-defined]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_trip="""
import openai
client = openai.OpenAI(max_retries=0)

def test_trip(dejacache_cassette):
    client.chat.completions.create(model="gpt-4o-mini",
                                   messages=[{"role": "user", "content": "Porto?"}])

def test_no_cassette():
    pass
""")
    out = tmp_path / "reports"
    quiet = ("-p", "no:xdist", "-p", "no:randomly", "-p", "no:asyncio", "-p", "no:anyio",
             "-p", "no:hypothesispytest", "-p", "no:timeout")
    pytester.runpytest(*quiet, f"--dejacache-report={out}").assert_outcomes(passed=2)
    pages = sorted(p.name for p in out.iterdir())
    assert pages == ["test_trip.py_test_trip.html"]
    assert '<span class="state recorded">' in (out / pages[0]).read_text()
    pytester.runpytest(*quiet, f"--dejacache-report={out}").assert_outcomes(passed=2)
    assert '<span class="state replayed">' in (out / pages[0]).read_text()


def test_a_failed_runs_page_shows_each_missed_request_and_its_diff(
        pytester: pytest.Pytester, loopback: object, tmp_path: pathlib.Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that failed on a miss: its page names the miss, shows the request that was made
    and how it differs from the nearest recording (not only the key)."""
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.openai_url)  # type: ignore[attr-defined]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.delenv("CI", raising=False)
    pytester.makepyfile(test_trip="""
import os, openai
client = openai.OpenAI(max_retries=0)

def test_trip(dejacache_cassette):
    client.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "user", "content": os.environ.get("CITY", "Porto") + "?"}])
""")
    out = tmp_path / "reports"
    quiet = ("-p", "no:xdist", "-p", "no:randomly", "-p", "no:asyncio", "-p", "no:anyio",
             "-p", "no:hypothesispytest", "-p", "no:timeout")
    pytester.runpytest(*quiet).assert_outcomes(passed=1)
    monkeypatch.setenv("CITY", "Braga")
    pytester.runpytest(*quiet, "--dejacache-mode=replay",
                       f"--dejacache-report={out}").assert_outcomes(failed=1)
    page = (out / "test_trip.py_test_trip.html").read_text()
    assert "Replay found no recording for" in page
    missed = page[page.index('class="step miss"'):]
    assert "Braga?" in missed  # the request made
    assert "Differences from the nearest recording, #0" in missed
    assert re.search(r"body\.messages\[0\]\.content: (&#x27;|')Porto\?(&#x27;|') -&gt; "
                     r"(&#x27;|')Braga\?", missed), missed[:2000]


def test_a_directory_reports_progress_and_skips_other_json(
        run_a: pathlib.Path, run_b: pathlib.Path) -> None:
    (run_a.parent / "notes.json").write_text('{"not": "a cassette"}')
    seen: list[tuple[int, int, str]] = []
    page = report(run_a.parent, progress=lambda i, n, p: seen.append((i, n, p.name)))
    assert seen == [(0, 3, "a.json"), (1, 3, "b.json"), (2, 3, "notes.json")]
    assert "Skipped (not cassettes)" in page and "notes.json" in page
    assert page.count('<section class="run"') == 2


def test_a_prompt_prefix_break_is_named_on_its_turn(loopback: object,
                                                    tmp_path: pathlib.Path) -> None:
    import anthropic

    import dejacache

    client = anthropic.Anthropic(base_url=loopback.url,  # type: ignore[attr-defined]
                                 api_key="sk-ant-x", max_retries=0)
    rules = "Answer briefly; name the tool you used. " * 150
    path = tmp_path / "clock.json"
    with dejacache.cassette(path, "record"):
        history: list[dict[str, str]] = []
        for now in ("12:04:31", "12:05:02"):
            history.append({"role": "user", "content": f"Question at {now}?"})
            client.messages.create(
                model="claude-sonnet-4-6", max_tokens=64, messages=list(history),
                system=[{"type": "text", "text": f"Current time: {now}\n{rules}",
                         "cache_control": {"type": "ephemeral"}}])
            history.append({"role": "assistant", "content": "Noted."})
    turns = [s.prefix for s in load_run(path).steps]
    assert [t.turn for t in turns if t] == [1, 2]
    second = turns[1]
    assert second is not None and second.breaks
    assert "system" in second.breaks[0] and "12:04:31 → 12:05:02" in second.breaks[0]
    assert "12:04:31 → 12:05:02" in report(path)
