"""Fixtures for the report tests: two recorded runs (see report_recordings.py)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from report_recordings import record_run

from loopback_provider import loopback

__all__ = ["loopback"]


@pytest.fixture
def run_a(loopback: Any, tmp_path: pathlib.Path) -> pathlib.Path:
    return record_run(loopback, tmp_path / "runs" / "a.json")


@pytest.fixture
def run_b(loopback: Any, tmp_path: pathlib.Path) -> pathlib.Path:
    return record_run(loopback, tmp_path / "runs" / "b.json", city="Porto", extra_tool=True)
