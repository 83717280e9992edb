"""Every Python example in README.md and docs/ runs.

Each ```python block is one test, run as printed against the loopback provider of
tests/http/fake_provider.py: the SDKs find it through ``OPENAI_BASE_URL`` /
``ANTHROPIC_BASE_URL`` (and a dummy key), the way a reader's own environment would point
them at the real API. A block that defines ``test_*`` functions is a pytest example: it runs
in an inner pytest session twice, first recording (the local default) and then as CI does, with
``CI=true`` and no API key, where every call must replay. Amazon Bedrock and the Gemini API
are loopback fakes too (tests/http/fake_bedrock.py, fake_gemini.py), found by boto3 through
``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` and by google-genai through ``GOOGLE_GEMINI_BASE_URL``.
A block that imports an optional
package this venv does not have (langwatch-scenario, the agent frameworks) is skipped with the
make target that runs that package's tests.
"""

from __future__ import annotations

import os
import pathlib
import re
import time
from collections.abc import Iterator
from typing import Any

import anthropic  # noqa: F401  (loaded before the inner sessions: they share the modules)
import openai  # noqa: F401
import pytest

from dejacache.cassettes import ageing
from loopback_provider import http_fake, loopback

__all__ = ["loopback"]

ROOT = pathlib.Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# Packages whose examples run in their own venvs (make target in the skip reason).
ELSEWHERE = {"scenario": "make test-scenario", "agents": "make test-frameworks",
             "pydantic_ai": "make test-frameworks", "langgraph": "make test-frameworks",
             "langchain": "make test-frameworks", "langchain_openai": "make test-frameworks",
             "smolagents": "make test-frameworks", "agno": "make test-frameworks",
             "dspy": "make test-frameworks", "crewai": "make test-frameworks",
             "llama_index": "make test-frameworks", "litellm": "make test-gen2",
             "run_agent": "make test-hermes"}


def _examples() -> list[Any]:
    out = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            name = f"{path.relative_to(ROOT)}:{line}"
            out.append(pytest.param(m.group(1), id=name))
    return out


EXAMPLES = _examples()


@pytest.fixture
def other_providers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Bedrock and the Gemini API on loopback, where boto3 and google-genai look."""
    bedrock = http_fake("fake_bedrock").FakeBedrock().start()
    gemini = http_fake("fake_gemini").FakeGemini().start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", bedrock.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIADOCSEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "docs-example-not-a-real-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", gemini.url)
    monkeypatch.setenv("GEMINI_API_KEY", "docs-example-not-a-real-key")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    try:
        yield [bedrock, gemini]
    finally:
        bedrock.stop()
        gemini.stop()


@pytest.fixture
def reader_env(loopback: Any, other_providers: list[Any], tmp_path: pathlib.Path,
               monkeypatch: pytest.MonkeyPatch) -> Any:
    """A reader's shell, with the providers on loopback and a scratch project directory."""
    loopback.others = other_providers
    # And the reader's clock. The suite holds the cassettes' clock at the second the test
    # began (tests/conftest.py), but an example reads time.time() as a reader would: the
    # ageing example dates an entry "45 days before time.time()", and once the wall clock had
    # passed the next whole second the held clock judged it 44d 23h 59m old and the warning
    # said "recorded 44d ago" (1 run in 20 alone; every run that crossed a second boundary
    # between the fixture's setup and the example's time.time(), more often under load).
    monkeypatch.setattr(ageing, "clock", time.time)
    monkeypatch.setenv("OPENAI_BASE_URL", loopback.openai_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", loopback.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-docs-example-not-a-real-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-docs-example-not-a-real-key")
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return loopback


def _skip_if_elsewhere(exc: ModuleNotFoundError) -> None:
    top = (exc.name or "").partition(".")[0]
    if top in ELSEWHERE:
        pytest.skip(f"needs {top}, which runs in its own venv: {ELSEWHERE[top]}")


@pytest.mark.parametrize("code", EXAMPLES)
def test_example_runs(code: str, reader_env: Any, pytester: pytest.Pytester,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    if re.search(r"^(async )?def test_", code, re.M):
        _run_pytest_example(code, reader_env, pytester, monkeypatch)
        return
    try:
        exec(compile(code, "<example>", "exec"), {"__name__": "__example__"})
    except ModuleNotFoundError as exc:
        _skip_if_elsewhere(exc)
        raise


_QUIET = ("-p", "no:xdist", "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:asyncio",
          "-p", "no:timeout",
          "-p", "no:randomly")


def _run_pytest_example(code: str, fake: Any, pytester: pytest.Pytester,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    if re.search(r"^\s*import scenario\b", code, re.M):
        try:
            import scenario  # noqa: F401
        except ModuleNotFoundError as exc:
            _skip_if_elsewhere(exc)
    pytester.makepyfile(test_example=code)
    for var in ("CI", "DEJACACHE_MODE"):
        monkeypatch.delenv(var, raising=False)
    first = pytester.runpytest(*_QUIET)   # on a developer's machine: records
    assert first.ret == 0, first.stdout.str()
    assert first.parseoutcomes().get("passed", 0) > 0
    live = [p.count() for p in (fake, *fake.others)]
    monkeypatch.setenv("CI", "true")       # in CI: replays, and needs no key
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(var)
    second = pytester.runpytest(*_QUIET)
    assert second.ret == 0, second.stdout.str()
    assert [p.count() for p in (fake, *fake.others)] == live, "the CI run reached a provider"
    assert os.environ.get("CI") == "true"


def test_examples_read_the_readers_clock(reader_env: Any) -> None:
    """Cassettes stamp and judge ages by the clock an example's own time.time() reads."""
    before = time.time()
    assert ageing.clock() >= before


def test_every_page_has_been_collected() -> None:
    assert any(str(p).endswith("getting-started.md") for p in FILES)
    assert len(EXAMPLES) >= 10
