"""The Node helper (``dejacache-proxy.mjs``) under the real vitest and openai-node: tests that
run at once each record into their own cassette (``tape.for(ctx)``), and a passing test
whose cassette did not hold (a strict cassette's calls not all made) fails saying so."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import orjson
import pytest
from fake_provider import FakeProvider
from proxy_support import NODE_DIR, entries, need_node

KEY = "sk-node-helper-7d2a"

CONCURRENT = """\
import { afterEach, beforeEach, expect, test } from "vitest";
import OpenAI from "openai";
import { cassettes } from "./dejacache-proxy.mjs";

const tape = cassettes({ beforeEach, afterEach });

for (const n of [1, 2, 3, 4]) {
  test.concurrent(`asks ${n}`, async (ctx) => {
    const client = new OpenAI({ baseURL: tape.for(ctx).baseURL("openai") + "/v1" });
    const messages = [{ role: "user", content: `question ${n}` }];
    const r = await client.chat.completions.create({ model: "m", messages });
    expect(r.choices[0].message.content).toBeTruthy();
  });
}

test.concurrent("one shared tape is refused while several tests run", async () => {
  await new Promise((resolve) => setTimeout(resolve, 50));
  expect(() => tape.url).toThrow(/tape.for\\(ctx\\)/);
});
"""

STRICT = """\
import { afterEach, beforeEach, test } from "vitest";
import OpenAI from "openai";
import { cassettes } from "./dejacache-proxy.mjs";

const tape = cassettes({ beforeEach, afterEach }, { strict: true });

test("asks twice", async () => {
  const client = new OpenAI({ baseURL: tape.baseURL("openai") + "/v1" });
  const questions = process.env.ONLY_ONE ? ["one"] : ["one", "two"];
  for (const content of questions) {
    await client.chat.completions.create({ model: "m", messages: [{ role: "user", content }] });
  }
});
"""


@pytest.fixture
def slow_fake() -> Iterator[FakeProvider]:
    # Each answer takes 0.3 s: the concurrent tests' calls are in flight together.
    server = FakeProvider(latency=0.3).start()
    yield server
    server.stop()


def vitest(project: pathlib.Path, fake: FakeProvider, **env: str
           ) -> subprocess.CompletedProcess[str]:
    """``dejacache proxy ... -- npx vitest run`` in ``project``, the provider being ``fake``."""
    full = {k: v for k, v in os.environ.items() if k not in ("CI", "OPENAI_API_KEY")}
    full.update(env, OPENAI_API_KEY=KEY,
                PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        ["dejacache", "proxy", "--upstream", f"openai={fake.url}", "--cassette-dir",
         "cassettes", "--", "npx", "vitest", "run"],
        cwd=project, env=full, capture_output=True, text=True, timeout=240)


def project_with(test: str, tmp_path: pathlib.Path) -> pathlib.Path:
    project = tmp_path / "agent"
    project.mkdir()
    (project / "node_modules").symlink_to(NODE_DIR / "node_modules")
    (project / "package.json").write_text('{"type": "module"}\n')
    (project / "vitest.config.mjs").write_text('export default { cacheDir: ".vite" };\n')
    (project / "agent.test.mjs").write_text(test)
    helper = pathlib.Path(__file__).resolve().parents[2] / "src" / "dejacache" / "proxying"
    (project / "dejacache-proxy.mjs").write_bytes(
        (helper / "node" / "dejacache-proxy.mjs").read_bytes())
    return project


def asked(cassette: pathlib.Path) -> list[str]:
    """The questions the calls recorded in ``cassette`` asked."""
    found = []
    for entry in entries(cassette):
        text = orjson.dumps(entry["request"]).decode()
        found += [f"question {n}" for n in range(1, 5) if f"question {n}" in text]
    return found


def test_tests_running_at_once_each_record_their_own_cassette(
        tmp_path: pathlib.Path, slow_fake: FakeProvider) -> None:
    need_node()
    project = project_with(CONCURRENT, tmp_path)
    out = vitest(project, slow_fake)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "5 passed" in out.stdout
    folder = project / "cassettes" / "agent.test"
    for n in (1, 2, 3, 4):
        assert asked(folder / f"asks_{n}.json") == [f"question {n}"]
    assert slow_fake.count() == 4


def test_a_passing_test_whose_strict_cassette_did_not_hold_fails(
        tmp_path: pathlib.Path, fake: FakeProvider) -> None:
    need_node()
    project = project_with(STRICT, tmp_path)
    first = vitest(project, fake)
    assert first.returncode == 0, first.stdout + first.stderr
    again = vitest(project, fake, CI="1", ONLY_ONE="1")
    out = again.stdout + again.stderr
    assert again.returncode != 0, out
    assert "did not hold" in out and "1 of the 2 recorded calls" in out
    assert fake.count() == 2
