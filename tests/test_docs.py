"""The docs stay true to the code: every CLI command and option is in the CLI reference,
every page is in the site's navigation, and user-facing text names no internal paths."""

from __future__ import annotations

import argparse
import pathlib
import re

from dejacache.cli import build_parser

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_the_cli_reference_documents_every_command_and_option() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    missing = []
    for name, p in _commands().items():
        if f"### `dejacache {name}`" not in text:
            missing.append(f"command {name}")
        for action in p._actions:
            for opt in action.option_strings:
                if opt.startswith("--") and opt != "--help" and f"`{opt}" not in text \
                        and f" {opt}" not in text and f"[{opt}" not in text:
                    missing.append(f"{name} {opt}")
    assert not missing, f"add to docs/cli.md: {missing}"


def test_every_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    listed = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", nav, re.M))
    assert pages == listed


def test_user_facing_text_has_no_internal_references() -> None:
    for path in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\bissue \d+\b|/work/|\bthe lead\b", text, re.I), path


def test_the_cli_reference_lists_every_pytest_option() -> None:
    import dejacache.pytest_plugin as plugin

    source = pathlib.Path(plugin.__file__).read_text(encoding="utf-8")  # (the gate's too)
    options = set(re.findall(r'addoption\(\s*"(--dejacache-[a-z-]+)"', source))
    inis = {*plugin._PLUGIN_INI, *(k.ini for k in plugin._project.KEYS.values() if k.ini)}
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert options and inis
    assert [o for o in sorted(options | inis) if f"`{o}" not in text] == []


def test_the_readme_lists_every_user_facing_extra() -> None:
    """Every extra a user installs is in the README's table; the ones for this repository's
    own test environments, benchmarks and docs are not meant for users."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"]["optional-dependencies"]
    ours = {n for n in extras if n.endswith("-test") or n in ("dev", "docs", "bench")}
    table = (ROOT / "README.md").read_text(encoding="utf-8").split("| extra | for |", 1)[1]
    table = table.split("\n\n", 1)[0]
    listed = set(re.findall(r"`(?:dejacache)?\[([a-z0-9-]+)\]`", table))
    assert sorted(set(extras) - ours - listed) == []
    assert listed <= set(extras)
