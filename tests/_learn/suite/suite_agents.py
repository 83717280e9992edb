"""Agents whose prompts carry clocks, ids, temp paths, ports, PIDs and nonces: the suite
``dejacache learn`` is measured on (copied into a temporary project as test_agents.py).

Each test records through its cassette (``@pytest.mark.dejacache``); every value a test
makes volatile on purpose goes through ``volatile(...)``. The model's answers (with their
nonces) and the tool's results are quoted back in later requests: echoes, never volatile.
``test_order_status`` is the trap: two calls that differ only in an order UUID that matters,
so a rule masking every UUID would give the two orders one answer.
"""

from __future__ import annotations

import datetime
import json
import os
import secrets
import tempfile
import time
import uuid
from typing import Any

import httpx
import pytest

import dejacache

pytestmark = pytest.mark.dejacache

TOOLS: list[Any] = [{"type": "function", "function": {
    "name": "get_weather", "description": "weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_scheduler_knows_the_time(client: Any, volatile: Any) -> None:
    now = volatile(datetime.datetime.now(datetime.UTC).isoformat())
    msgs: list[Any] = [
        {"role": "system", "content": f"You are a scheduler. The time is {now}."},
        {"role": "user", "content": "Book a meeting tomorrow at ten."}]
    first = client.chat.completions.create(model="gpt-test", messages=msgs)
    msgs.append(first.choices[0].message.model_dump(exclude_none=True))  # an echo
    sent = volatile(datetime.datetime.now().strftime("%H:%M:%S.%f"))
    msgs.append({"role": "user", "content": f"Confirm it (sent at {sent})."})
    stream = client.chat.completions.create(model="gpt-test", messages=msgs, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert "reply" in text


def test_incident_summary_is_traced(client: Any, volatile: Any) -> None:
    trace = volatile(secrets.token_hex(16))
    rid = volatile(uuid.uuid4())
    r = client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": f"Summarise the incident. trace={trace}"}],
        metadata={"request_id": rid}, extra_body={"client_ts": time.time()})
    assert r.choices[0].message.content


def test_report_goes_to_a_temp_dir(client: Any, volatile: Any, tmp_path: Any) -> None:
    report = tmp_path / "report.md"
    volatile(str(tmp_path))
    scratch = volatile(tempfile.mkdtemp())
    os.rmdir(scratch)
    r = client.chat.completions.create(model="gpt-test", messages=[
        {"role": "user", "content": f"Write the summary to {report}; scratch space: "
                                    f"{scratch}."}])
    assert r.choices[0].message.content


def test_sign_in_with_nonces(client: Any, volatile: Any) -> None:
    nonce = volatile(secrets.token_hex(8))
    csrf = volatile(secrets.token_urlsafe(18))
    header = volatile(secrets.token_hex(6))
    r = client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": f"Sign me in. nonce={nonce} csrf={csrf}"}],
        extra_headers={"x-client-nonce": header})
    assert r.choices[0].message.content


def test_worker_reports_where_it_runs(client: Any, provider: Any, tools: Any,
                                      volatile: Any) -> None:
    t0 = time.perf_counter()
    ts = volatile(int(time.time() * 1000))
    weather = json.dumps(httpx.get(f"{tools.url}/weather",
                                   params={"city": "Paris", "ts": ts}).json(), sort_keys=True)
    took = volatile(f"{(time.perf_counter() - t0) * 1000:.2f}ms")
    pid, port = volatile(os.getpid()), volatile(provider.port)
    r = client.chat.completions.create(model="gpt-test", messages=[
        {"role": "user", "content": f"Worker pid {pid} on 127.0.0.1:{port}. The weather call "
                                    f"took {took} and said {weather}."}])
    assert r.choices[0].message.content


def test_tool_loop_quotes_the_tool(client: Any, tools: Any) -> None:
    msgs: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.chat.completions.create(model="gpt-test", messages=msgs, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    # (the parsed answer, written out: a replayed JSON body's raw text orders its keys)
    result = json.dumps(httpx.get(f"{tools.url}/weather", params={"city": "Paris"}).json(),
                        sort_keys=True)
    msgs += [first.choices[0].message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": result}]
    second = client.chat.completions.create(model="gpt-test", messages=msgs, tools=TOOLS)
    assert "Tool said" in (second.choices[0].message.content or "")


ORDERS = ("6f1c2b9e-7a34-4d2e-9c1a-0b5e8f3d7a21", "0d5e9a47-2c1b-4f8e-a6d3-91e7c2b4f580")


def test_order_status(client: Any, volatile: Any) -> None:
    answers = []
    for order in ORDERS:  # the order's UUID matters: each is answered for itself
        rid = volatile(uuid.uuid4())
        r = client.chat.completions.create(model="gpt-test", messages=[
            {"role": "user", "content": f"Where is order {order}? request id: {rid}"}])
        answers.append(r.choices[0].message.content)
    assert answers[0] != answers[1]


@dejacache.cache(kind="tool")
def plan_day(city: str, at: str) -> str:
    return f"plan for {city} made at {at} ({secrets.token_hex(4)})"


def test_cached_tool_with_a_clock(volatile: Any) -> None:
    at = volatile(datetime.datetime.now().isoformat(timespec="seconds") + "."
                  + f"{time.time_ns() % 1_000_000:06d}")
    assert plan_day("Paris", at).startswith("plan for Paris")
