"""tests/http/fake_provider.py for tests outside tests/http (docs examples, report, plugin).

``tests/http`` is not on ``sys.path`` from elsewhere, and importing it as a package would
shadow the standard library's ``http``; the module is loaded by path once, under the name
tests/http's own conftest gives it, so both see the same class.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest


def http_fake(name: str) -> Any:
    """The module ``tests/http/<name>.py`` (``fake_provider``, ``fake_bedrock``,
    ``fake_gemini``), loaded once under the name tests/http's conftest gives it."""
    mod = sys.modules.get(name)
    if mod is None:
        path = pathlib.Path(__file__).parent / "http" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


def fake_provider_module() -> Any:
    return http_fake("fake_provider")


@pytest.fixture
def loopback() -> Iterator[Any]:
    """A started FakeProvider on 127.0.0.1 (stopped after the test)."""
    server = fake_provider_module().FakeProvider().start()
    try:
        yield server
    finally:
        server.stop()
