"""boto3 (botocore's HTTP sender on urllib3) through dejacache's urllib3 seam.

A plain ``bedrock-runtime`` client against the loopback Bedrock (``endpoint_url``, dummy AWS
keys and session token): recorded in one process, replayed in a fresh one more than a second
later (SigV4's ``x-amz-date`` and signature differ) with the server stopped and a listener on
its port counting connections. Bedrock's own provider module and eventstream codec are not
what is tested here: only that botocore's calls go through the shared exchange.
"""

from __future__ import annotations

import pathlib
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

pytest.importorskip("boto3")

from boto3_cases import CREDENTIALS
from cases_support import MODELS, case_command, case_env
from fake_bedrock import FakeBedrock

from provider_support import DropListener

HERE = pathlib.Path(__file__).parent
# What SigV4 and botocore put on every request; none of it may reach a file.
SIGNING = ("AWS4-HMAC-SHA256", "x-amz-date", "x-amz-security-token", "amz-sdk-invocation-id",
           "amz-sdk-request", "x-amz-content-sha256", "authorization")


def _run(*args: str, model: str) -> dict[str, Any]:
    proc = subprocess.run(case_command("boto3_cases.py", *args, model=model),
                          capture_output=True, text=True, env=case_env(), timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out: dict[str, Any] = orjson.loads(proc.stdout)
    return out


# Twice: restated in httpx2's model, and with httpx and httpx2 not importable (a plain
# ``pip install dejacache boto3``: dejacache's own model).
@pytest.fixture(scope="module", params=MODELS)
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[dict[str, Any]]:
    cassette = tmp_path_factory.mktemp("boto3") / "bedrock.json"
    bedrock = FakeBedrock(chunk_delay=0.001).start()
    bedrock.script.extend([{}, {}, {"status": 429}])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        refused = f"http://127.0.0.1:{s.getsockname()[1]}"
    try:
        recorded = _run("record", str(cassette), bedrock.url, refused, model=request.param)
        sent = list(bedrock.requests)
    finally:
        bedrock.stop()
    time.sleep(1.1)  # SigV4 dates have second resolution: the replay signs differently
    guard = DropListener(bedrock.port)
    try:
        replayed = _run("replay", str(cassette), bedrock.url, refused, model=request.param)
    finally:
        guard.close()
    yield {"recorded": recorded, "replayed": replayed, "sent": sent, "cassette": cassette,
           "connections": guard.count}


def test_boto3_replays_in_a_fresh_process_with_no_connection(runs: dict[str, Any]) -> None:
    assert len(runs["sent"]) == 3
    assert runs["connections"] == 0
    assert runs["replayed"] == runs["recorded"]


def test_converse_answer_and_request_id_come_back(runs: dict[str, Any]) -> None:
    answer, status, request_id = runs["replayed"]["converse"]
    assert status == 200 and request_id
    assert answer["output"]["message"]["content"][0]["text"].startswith("Hello from the fake")
    assert answer["usage"]["totalTokens"] > 0


def test_converse_stream_events_come_back_parsed(runs: dict[str, Any]) -> None:
    kinds = [next(iter(e)) for e in runs["replayed"]["converse_stream"]]
    assert kinds[0] == "messageStart" and "contentBlockDelta" in kinds
    assert kinds[-2:] == ["messageStop", "metadata"]


def test_a_throttled_call_replays_as_botocores_client_error(runs: dict[str, Any]) -> None:
    assert runs["replayed"]["throttled"] == ["ThrottlingException", "ThrottlingException", 429]


def test_a_refused_connection_replays_as_botocores_error(runs: dict[str, Any]) -> None:
    """urllib3's NewConnectionError, replayed, becomes botocore's EndpointConnectionError."""
    assert runs["replayed"]["refused"] == ["EndpointConnectionError", "NewConnectionError"]


def test_signatures_and_credentials_reach_no_file(runs: dict[str, Any]) -> None:
    sent = {k.lower(): v for k, v in runs["sent"][0]["headers"].items()}
    assert sent["x-amz-security-token"] == CREDENTIALS["aws_session_token"]  # it was sent
    data = runs["cassette"].read_bytes().lower()
    for secret in (*CREDENTIALS.values(), *SIGNING, sent["authorization"]):
        assert secret.lower().encode() not in data, secret
