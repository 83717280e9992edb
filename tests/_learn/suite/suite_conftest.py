"""conftest.py of the agent suite ``dejacache learn`` is measured on (copied into a
temporary project by tests/_learn and benchmarks/bench_learn.py).

The loopback provider and tool API answer every call with fresh nonces and ids, as live
services do. ``volatile(value)`` notes a value a test put into a request on purpose (a
clock, an id, a temp path, a nonce): the ground truth the measurement checks the learned
rules against, appended to the file ``LEARN_TRUTH`` names, with the run it came from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator

import openai
import pytest
from fake_provider import FakeProvider
from fake_tool_api import ToolAPI


@pytest.fixture(scope="session")
def provider() -> Iterator[FakeProvider]:
    server = FakeProvider().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tools() -> Iterator[ToolAPI]:
    server = ToolAPI().start()
    yield server
    server.stop()


@pytest.fixture
def client(provider: FakeProvider) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=provider.openai_url, api_key="sk-learn-suite-0123456789abcdef",
                       max_retries=0) as c:
        yield c


@pytest.fixture
def volatile(request: pytest.FixtureRequest) -> Iterator[Callable[[str], str]]:
    values: list[str] = []

    def note(value: object) -> str:
        values.append(str(value))
        return str(value)

    yield note
    path = os.environ.get("LEARN_TRUTH")
    if path and values:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"run": os.environ.get("DEJACACHE_LEARN_DIR", ""),
                                 "test": request.node.nodeid, "values": values}) + "\n")
