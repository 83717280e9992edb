"""The README's "Agents in other languages" section, run as printed: its TypeScript test file
in a vitest project (the real vitest and openai-node of tests/node), and its three commands.
The first run records against the loopback provider; the ``CI`` run replays with the
provider stopped and no connection reaching its port; the key is in no file. The docs page
holds the same recipe (pinned equal), the ``node --test`` one and jest's command, run here
too."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

from fake_provider import FakeProvider
from proxy_support import NODE_DIR, files_text, need_node

from provider_support import DropListener

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
PAGE = README.parent / "docs" / "other-languages.md"
KEY = "sk-readme-vitest-5b1e9c"


def section() -> tuple[str, list[str]]:
    text = README.read_text(encoding="utf-8")
    part = text[text.index("## Agents in other languages"):]
    part = part[:part.index("\n## ", 3)]
    ts = re.findall(r"```ts\n(.*?)```", part, re.S)
    sh = re.findall(r"```sh\n(.*?)```", part, re.S)
    assert len(ts) == 1 and len(sh) == 1
    return ts[0], [line for line in sh[0].splitlines() if line.strip()]


def test_the_section_holds_a_test_file_and_three_commands() -> None:
    ts, commands = section()
    assert ts.startswith("// test/agent.test.ts\n")
    assert [c.split("#")[0].split()[-2:] for c in commands][1:] == [["vitest", "run"]] * 2
    page = PAGE.read_text(encoding="utf-8")
    assert f"```ts\n{ts}```" in page
    assert "```sh\n" + "\n".join(commands) + "\n```" in page


def test_the_first_command_says_how_many_files_it_copies(tmp_path: pathlib.Path) -> None:
    from dejacache.cli import main

    assert main(["proxy", "--node-helper", str(tmp_path)]) == 0
    copied = sorted(p.name for p in tmp_path.iterdir())
    assert copied == ["dejacache-proxy.d.mts", "dejacache-proxy.mjs"]
    said = {1: "(one file, ", 2: "(two files, "}[len(copied)]
    assert said in section()[1][0]


def node_test_recipe() -> str:
    blocks = re.findall(r"```js\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1 and blocks[0].startswith("// agent.test.mjs (node --test)")
    return blocks[0]


def run(line: str, project: pathlib.Path, fake: FakeProvider) -> subprocess.CompletedProcess[str]:
    """A README command as a user's shell runs it, the provider being the loopback one."""
    line = line.replace("sk-...", KEY).replace(
        "dejacache proxy", f"dejacache proxy --upstream openai={fake.url}")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "OPENAI_API_KEY")}
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(line, shell=True, cwd=project, env=env, capture_output=True,
                          text=True, timeout=240)


def project_with(ts: str, tmp_path: pathlib.Path) -> pathlib.Path:
    project = tmp_path / "agent"
    (project / "test").mkdir(parents=True)
    (project / "node_modules").symlink_to(NODE_DIR / "node_modules")
    (project / "package.json").write_text('{"type": "module"}\n')
    # vitest keeps its cache under node_modules by default: here, the shared tests/node's
    (project / "vitest.config.mjs").write_text('export default { cacheDir: ".vite" };\n')
    (project / "test" / "agent.test.ts").write_text(ts)
    return project


def test_a_vitest_suite_records_once_and_replays_in_ci_with_no_connection(
        tmp_path: pathlib.Path, fake: FakeProvider) -> None:
    need_node()
    ts, (helper, record, replay) = section()
    test_file = (project := project_with(ts, tmp_path)) / "test" / "agent.test.ts"
    assert run(helper, project, fake).returncode == 0
    assert (project / "test" / "dejacache-proxy.mjs").is_file()

    first = run(record, project, fake)
    assert first.returncode == 0, first.stdout + first.stderr
    cassette = project / "test" / "cassettes" / "test" / "agent.test" / "the_agent_says_hello.json"
    assert cassette.is_file() and fake.count() == 1

    port = fake.port
    fake.stop()
    listener = DropListener(port)
    try:
        second = run(replay, project, fake)
        test_file.write_text(ts.replace("Say hello.", "Say goodbye."))
        miss = run(replay, project, fake)
    finally:
        listener.close()
    assert second.returncode == 0, second.stdout + second.stderr
    assert "1 passed" in second.stdout
    assert listener.count == 0
    for path, text in files_text(project / "test"):
        assert KEY not in text, path
    assert miss.returncode != 0
    out = miss.stdout + miss.stderr
    assert "ReplayMiss" in out and "'Say hello.' -> 'Say goodbye.'" in out
    assert 'DEJACACHE_MODE=record npx vitest run test/agent.test.ts -t "the agent says hello"' \
        in out


def test_with_cassette_under_nodes_own_runner(tmp_path: pathlib.Path,
                                             fake: FakeProvider) -> None:
    """The runner-agnostic form (``withCassette``) under node's own test runner, as the
    docs page prints it."""
    need_node()
    project = tmp_path / "agent"
    project.mkdir()
    (project / "node_modules").symlink_to(NODE_DIR / "node_modules")
    (project / "package.json").write_text('{"type": "module"}\n')
    (project / "agent.test.mjs").write_text(node_test_recipe())
    assert run("dejacache proxy --node-helper .", project, fake).returncode == 0
    command = (f"OPENAI_API_KEY={KEY} dejacache proxy --cassette-dir cassettes -- "
               "node --test agent.test.mjs")
    out = run(command, project, fake)
    assert "# pass 2" in out.stdout and "# fail 1" in out.stdout, out.stdout + out.stderr
    assert sorted(p.name for p in (project / "cassettes").iterdir()) == ["passes.json"]


JEST = ("dejacache proxy --cassette-dir cassettes -- node --experimental-vm-modules "
        "node_modules/jest/bin/jest.js")
JEST_TEST = """\
import OpenAI from "openai";
import { withCassette } from "./dejacache-proxy.mjs";

const ask = async (tape, content) => {
  const client = new OpenAI({ baseURL: tape.baseURL("openai") + "/v1" });
  const messages = [{ role: "user", content }];
  const r = await client.chat.completions.create({ model: "m", messages });
  return r.choices[0].message.content;
};

test("passes", () => withCassette("passes", async (tape) => {
  expect(await ask(tape, "hi")).toMatch(/./);
}));

test("fails", () => withCassette("fails", async (tape) => {
  await ask(tape, "hi");
  expect(1).toBe(2); // a failing test: its cassette is not written
}));
"""


def test_with_cassette_under_jest(tmp_path: pathlib.Path, fake: FakeProvider) -> None:
    """``withCassette`` under the real jest, with the command the docs page prints: recorded,
    then replayed under ``CI`` with the provider stopped."""
    need_node()
    assert f"`{JEST}`" in PAGE.read_text(encoding="utf-8").replace("\n", " ")
    project = tmp_path / "agent"
    project.mkdir()
    (project / "node_modules").symlink_to(NODE_DIR / "node_modules")
    (project / "package.json").write_text('{"type": "module"}\n')
    (project / "agent.test.mjs").write_text(JEST_TEST)
    assert run("dejacache proxy --node-helper .", project, fake).returncode == 0
    first = run(f"OPENAI_API_KEY={KEY} {JEST}", project, fake)
    out = first.stdout + first.stderr
    assert first.returncode != 0 and "1 failed, 1 passed" in out, out
    assert sorted(p.name for p in (project / "cassettes").iterdir()) == ["passes.json"]
    assert fake.count() == 2

    (project / "agent.test.mjs").write_text(JEST_TEST.split('test("fails"')[0])
    port = fake.port
    fake.stop()
    listener = DropListener(port)
    try:
        second = run(f"CI=1 {JEST}", project, fake)
    finally:
        listener.close()
    out = second.stdout + second.stderr
    assert second.returncode == 0 and "1 passed" in out, out
    assert listener.count == 0
    for path, text in files_text(project / "cassettes"):
        assert KEY not in text, path
