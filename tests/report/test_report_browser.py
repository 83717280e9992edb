"""The report in a real browser: Debian's headless Chromium opens the page
from disk, with networking and background services off, and we read what it rendered.

Installed by ``make chromium`` (part of ``make test``); skipped with the reason when absent.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

from dejacache.report import report

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no headless Chromium on PATH (make chromium installs Debian's package)")


def _chromium(page: pathlib.Path, profile: pathlib.Path, *args: str) -> str:
    cmd = [
        _browser(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage",
        f"--user-data-dir={profile}", *args, page.as_uri(),
    ]
    env = {**os.environ, "HOME": str(profile)}  # keep Chromium's caches out of the real home
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _text(dom: str) -> str:
    """The visible text of a dumped DOM (tags dropped, whitespace collapsed)."""
    dom = re.sub(r"<style.*?</style>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def test_chromium_renders_the_run(run_a: pathlib.Path, tmp_path: pathlib.Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(report(run_a), encoding="utf-8")
    dom = _chromium(page, tmp_path / "profile", "--dump-dom")
    text = _text(dom)
    for expected in ("dejacache report", "Timeline", "openai.chat.completions",
                     "tools.get_weather", "anthropic.messages", "input tokens",
                     "estimated cost", "Prompt-prefix reuse per turn", "recorded"):
        assert expected in text, expected
    assert dom.count('class="tl"') == 4  # one timeline bar per call
    shot = tmp_path / "report.png"
    _chromium(page, tmp_path / "profile", "--window-size=1280,1600", f"--screenshot={shot}")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    keep = os.environ.get("DEJACACHE_TEST_SCREENSHOTS")
    if keep:  # e.g. a CI artifact directory
        pathlib.Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, pathlib.Path(keep) / "report.png")


def test_chromium_renders_the_drift(run_a: pathlib.Path, run_b: pathlib.Path,
                                    tmp_path: pathlib.Path) -> None:
    page = tmp_path / "drift.html"
    page.write_text(report(run_a, run_b), encoding="utf-8")
    text = _text(_chromium(page, tmp_path / "profile", "--dump-dom"))
    for expected in ("dejacache drift report", "Added in B", "#2 tools.get_hotels",
                     "calls changed", "token delta", "Side by side"):
        assert expected in text, expected
    shot = tmp_path / "drift.png"
    _chromium(page, tmp_path / "profile", "--window-size=1280,1600", f"--screenshot={shot}")
    assert shot.read_bytes()[:4] == b"\x89PNG"
