"""Amazon Bedrock end to end: boto3's ``bedrock-runtime`` client recorded against the loopback
fake, then replayed in a fresh process with the fake stopped and a listener on its port
counting connections (none may come).

What the agent does is in ``bedrock_cases.py``: Converse (text and a tool round trip),
ConverseStream (events, and its raw chunks), InvokeModel and InvokeModelWithResponseStream,
a 429, a 500 and a stream that fails midway. Checked here: the same answers and errors come
back as botocore's own objects, the eventstream is stored as readable events and handed back
one framed message per chunk, byte for byte, each step of the cassette is a priced model call
with its usage, and no AWS credential or signature reaches the file.
"""

from __future__ import annotations

import base64
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

pytest.importorskip("boto3")

from bedrock_cases import CREDENTIALS, MODEL, NOVA, SCRIPT
from fake_bedrock import FakeBedrock

import dejacache
from dejacache.http.eventstream import decode_all
from provider_support import DropListener

HERE = pathlib.Path(__file__).parent
SIGNING = ("AWS4-HMAC-SHA256", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256",
           "amz-sdk-invocation-id", "amz-sdk-request", "authorization", "Credential=")


def _run(*args: str) -> dict[str, Any]:
    paths = [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    proc = subprocess.run([sys.executable, str(HERE / "bedrock_cases.py"), *args],
                          capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = orjson.loads(proc.stdout)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    cassette = tmp_path_factory.mktemp("bedrock") / "bedrock.json"
    bedrock = FakeBedrock(chunk_delay=0.001).start()
    bedrock.script.extend(SCRIPT)
    try:
        recorded = _run("record", str(cassette), bedrock.url)["answers"]
        sent = list(bedrock.requests)
    finally:
        bedrock.stop()
    time.sleep(1.1)  # SigV4 dates have second resolution: the replay signs differently
    guard = DropListener(bedrock.port)
    try:
        replay = _run("replay", str(cassette), bedrock.url)
    finally:
        guard.close()
    yield {"recorded": recorded, "replayed": replay["answers"], "tape": replay["tape"],
           "sent": sent, "cassette": cassette, "connections": guard.count}


def test_the_whole_agent_replays_with_no_connection(runs: dict[str, Any]) -> None:
    assert len(runs["sent"]) == len(SCRIPT)
    assert runs["connections"] == 0
    rec, rep = runs["recorded"], runs["replayed"]
    assert set(rec) == set(rep) == {
        "converse", "tool_round_trip", "converse_stream", "converse_stream_chunks",
        "invoke_model", "invoke_stream", "throttled", "server_error", "midway"}
    for name in rec:
        if name != "converse_stream_chunks":  # chunked differently: see below
            assert rep[name] == rec[name], name


def test_the_replay_counts_the_tokens_and_dollars_it_saved(runs: dict[str, Any]) -> None:
    tape = runs["tape"]
    assert tape["replayed"] == len(SCRIPT)
    # the steps with a usage (the errors and the failed stream report none)
    steps = [s for s in dejacache.load_cassette(runs["cassette"]).steps if s.usage]
    assert len(steps) == 7
    assert tape["tokens_saved"] == sum(s.total_tokens for s in steps) > 0
    assert tape["dollars_saved"] > 0
    assert tape["dollars_saved"] == pytest.approx(sum(s.cost for s in steps))


def test_converse_and_the_tool_round_trip(runs: dict[str, Any]) -> None:
    answer, (status, request_id) = runs["replayed"]["converse"]
    assert status == 200 and request_id
    assert answer["output"]["message"]["content"][0]["text"].startswith("Hello from the fake")
    first, final, *_ = runs["replayed"]["tool_round_trip"]
    assert first["stopReason"] == "tool_use"
    assert "Tool said sunny" in final["output"]["message"]["content"][0]["text"]


def test_converse_stream_comes_back_event_by_event_byte_exact(runs: dict[str, Any]) -> None:
    events, _ = runs["replayed"]["converse_stream"]
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"]
    rec = [base64.b64decode(c) for c in runs["recorded"]["converse_stream_chunks"]]
    rep = [base64.b64decode(c) for c in runs["replayed"]["converse_stream_chunks"]]
    assert b"".join(rep) == b"".join(rec)  # the very bytes the fake sent
    # one whole eventstream message per chunk, as the fake wrote them
    assert len(rep) == len(decode_all(b"".join(rec))) > 5
    assert all(len(decode_all(c)) == 1 for c in rep)


def test_invoke_model_and_its_stream(runs: dict[str, Any]) -> None:
    msg, (status, _), rest = runs["replayed"]["invoke_model"]
    assert status == 200 and msg["type"] == "message" and msg["id"].startswith("msg_bdrk_")
    assert rest["contentType"] == "application/json"
    events, _, _ = runs["replayed"]["invoke_stream"]
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    assert events[-1]["type"] == "message_stop"


def test_errors_replay_as_botocores_own(runs: dict[str, Any]) -> None:
    rep = runs["replayed"]
    assert rep["throttled"][:2] == ["ThrottlingException", "ThrottlingException"]
    assert rep["throttled"][3] == 429
    assert rep["server_error"][:2] == ["InternalServerException", "InternalServerException"]
    assert rep["server_error"][3] == 500
    seen, error = rep["midway"]
    assert len(seen) == 2
    assert error[:2] == ["EventStreamError", "throttlingException"]


def test_the_cassette_holds_readable_events_usage_and_models(runs: dict[str, Any]) -> None:
    view = dejacache.load_cassette(runs["cassette"])
    steps = view.steps
    assert [s.name for s in steps] == [
        "bedrock.converse", "bedrock.converse", "bedrock.converse",
        "bedrock.converse_stream", "bedrock.converse_stream", "bedrock.invoke_model",
        "bedrock.invoke_model_with_response_stream", "bedrock.converse",
        "bedrock.invoke_model", "bedrock.converse_stream"]
    assert all(s.kind == "model" for s in steps)
    assert [s.model for s in steps[:3]] == [MODEL, NOVA, NOVA]
    ok = [s for s in steps if s.response["status"] == 200]
    assert all(s.tokens_exact and s.input_tokens > 0 and s.cost > 0 for s in ok[:7])
    stream = steps[3].response
    assert "bytes" not in stream
    kinds = [dict((h[0], h[1]) for h in ev["headers"])[":event-type"]
             for _, ev in stream["events"]]
    assert kinds[0] == "messageStart" and kinds[-1] == "metadata"
    assert orjson.loads(stream["events"][0][1]["payload"])["role"] == "assistant"
    assert steps[3].usage == {k: v for k, v in steps[3].usage.items()
                              if k in ("input_tokens", "output_tokens", "total_tokens")}


def test_signatures_and_credentials_reach_no_file(runs: dict[str, Any]) -> None:
    sent = {k.lower(): v for k, v in runs["sent"][0]["headers"].items()}
    assert sent["x-amz-security-token"] == CREDENTIALS["aws_session_token"]  # it was sent
    files = [p for p in runs["cassette"].parent.rglob("*") if p.is_file()]
    assert runs["cassette"] in files
    for f in files:
        data = f.read_bytes().lower()
        for secret in (*CREDENTIALS.values(), *SIGNING, sent["authorization"]):
            assert secret.lower().encode() not in data, (f, secret)
