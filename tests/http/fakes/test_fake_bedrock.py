"""The Bedrock fake, driven by the real boto3 ``bedrock-runtime`` client (botocore on urllib3),
with no dejacache involved: Converse, ConverseStream, InvokeModel and
InvokeModelWithResponseStream parse into boto3's own shapes, the eventstream framing is
byte-exact, and throttling / server errors are botocore's own exceptions."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

boto3 = pytest.importorskip("boto3")

from botocore.config import Config  # noqa: E402
from botocore.eventstream import EventStreamBuffer  # noqa: E402
from botocore.exceptions import ClientError, EventStreamError  # noqa: E402
from botocore.httpsession import URLLib3Session  # noqa: E402
from fake_bedrock import FakeBedrock  # noqa: E402
from fakes_support import raw_chunks, sent_headers  # noqa: E402

from provider_support import eventstream_message  # noqa: E402

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
USER: list[Any] = [{"role": "user", "content": [{"text": "hi"}]}]
TOOLS = {"tools": [{"toolSpec": {"name": "get_weather", "description": "Weather in a city",
                                 "inputSchema": {"json": {"type": "object"}}}}]}
ANTHROPIC = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
             "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def client(bedrock: FakeBedrock) -> Iterator[Any]:
    # One attempt: the error tests must see the first answer, not botocore's retries.
    c = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=bedrock.url,
                     aws_access_key_id="AKIAFAKEFAKEFAKE", aws_secret_access_key="fake-secret",
                     aws_session_token="fake-session-token",
                     config=Config(retries={"total_max_attempts": 1}))
    yield c
    c.close()


def test_converse_varies_per_call_and_reports_usage(client: Any, bedrock: FakeBedrock) -> None:
    first = client.converse(modelId=MODEL, messages=USER)
    second = client.converse(modelId=MODEL, messages=USER)
    assert isinstance(client._endpoint.http_session, URLLib3Session)
    texts = [r["output"]["message"]["content"][0]["text"] for r in (first, second)]
    assert texts[0] != texts[1]
    usage = first["usage"]
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"] > 0
    assert first["stopReason"] == "end_turn" and first["metrics"]["latencyMs"] > 0
    ids = {r["ResponseMetadata"]["RequestId"] for r in (first, second)}
    assert len(ids) == 2
    req = bedrock.requests[0]
    # The model travels in the path, percent-encoded; SigV4 signs with the dummy keys.
    assert req["path"] == "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
    assert sent_headers(req)["authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKIAFAKEFAKEFAKE/")
    assert sent_headers(req)["x-amz-security-token"] == "fake-session-token"


def test_converse_tool_round_trip(client: Any) -> None:
    msgs: list[Any] = list(USER)
    first = client.converse(modelId=MODEL, messages=msgs, toolConfig=TOOLS)
    assert first["stopReason"] == "tool_use"
    use = first["output"]["message"]["content"][0]["toolUse"]
    assert use["name"] == "get_weather" and use["input"] == {"city": "Paris"}
    msgs += [first["output"]["message"],
             {"role": "user", "content": [{"toolResult": {
                 "toolUseId": use["toolUseId"], "content": [{"text": "sunny"}]}}]}]
    final = client.converse(modelId=MODEL, messages=msgs, toolConfig=TOOLS)
    assert "Tool said sunny" in final["output"]["message"]["content"][0]["text"]


def test_converse_stream_events(client: Any) -> None:
    events = list(client.converse_stream(modelId=MODEL, messages=USER)["stream"])
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and kinds[-3:] == ["contentBlockStop", "messageStop",
                                                         "metadata"]
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events
                   if "contentBlockDelta" in e)
    assert text.startswith("Hello from the fake model")
    usage = events[-1]["metadata"]["usage"]
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"]


def test_converse_stream_tool_call(client: Any) -> None:
    events = list(client.converse_stream(modelId=MODEL, messages=USER,
                                         toolConfig=TOOLS)["stream"])
    start = next(e["contentBlockStart"]["start"]["toolUse"] for e in events
                 if "contentBlockStart" in e)
    args = "".join(e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in events
                   if "contentBlockDelta" in e)
    assert start["name"] == "get_weather" and json.loads(args) == {"city": "Paris"}
    assert {"messageStop": {"stopReason": "tool_use"}} in events


def test_eventstream_is_one_message_per_chunk_and_byte_exact(bedrock: FakeBedrock) -> None:
    """Each HTTP chunk is one eventstream message; botocore's parser accepts it, and framing
    its headers and payload again gives back the same bytes (what a replay must send)."""
    chunks = raw_chunks(f"{bedrock.url}/model/{MODEL}/converse-stream", {"messages": USER})
    assert len(chunks) > 5
    for chunk in chunks:
        buf = EventStreamBuffer()
        buf.add_data(chunk)
        (message,) = list(buf)
        assert message.headers[":message-type"] == "event"
        assert eventstream_message(message.headers, message.payload) == chunk
        assert "p" in json.loads(message.payload)  # AWS's padding field


def test_invoke_model_anthropic(client: Any) -> None:
    resp = client.invoke_model(modelId=MODEL, body=json.dumps(ANTHROPIC))
    msg = json.loads(resp["body"].read())
    assert msg["type"] == "message" and msg["id"].startswith("msg_bdrk_")
    assert msg["model"] == "claude-3-haiku-20240307"
    headers = resp["ResponseMetadata"]["HTTPHeaders"]
    assert int(headers["x-amzn-bedrock-output-token-count"]) == msg["usage"]["output_tokens"]


def test_invoke_model_with_response_stream_anthropic(client: Any) -> None:
    resp = client.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(ANTHROPIC))
    events = [json.loads(e["chunk"]["bytes"]) for e in resp["body"]]
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text.startswith("Hello from the fake model")
    metrics = events[-1]["amazon-bedrock-invocationMetrics"]
    assert metrics["outputTokenCount"] == events[-2]["usage"]["output_tokens"]


def test_invoke_stream_chunks_carry_base64(bedrock: FakeBedrock) -> None:
    (first, *_) = raw_chunks(f"{bedrock.url}/model/{MODEL}/invoke-with-response-stream",
                             ANTHROPIC)
    buf = EventStreamBuffer()
    buf.add_data(first)
    (message,) = list(buf)
    assert message.headers[":event-type"] == "chunk"
    event = json.loads(base64.b64decode(json.loads(message.payload)["bytes"]))
    assert event["type"] == "message_start"


def test_invoke_model_refuses_a_body_it_does_not_know(client: Any) -> None:
    with pytest.raises(client.exceptions.ValidationException) as info:
        client.invoke_model(modelId=MODEL, body=json.dumps({"prompt": "hi"}))
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


@pytest.mark.parametrize(("status", "code"), [(429, "ThrottlingException"),
                                              (500, "InternalServerException")])
def test_errors_are_botocores_own(client: Any, bedrock: FakeBedrock, status: int,
                                  code: str) -> None:
    bedrock.script.append({"status": status})
    with pytest.raises(getattr(client.exceptions, code)) as info:
        client.converse(modelId=MODEL, messages=USER)
    assert isinstance(info.value, ClientError)
    assert info.value.response["Error"]["Code"] == code
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == status


def test_error_before_a_stream(client: Any, bedrock: FakeBedrock) -> None:
    bedrock.script.append({"status": 429})
    with pytest.raises(client.exceptions.ThrottlingException):
        client.converse_stream(modelId=MODEL, messages=USER)


def test_error_midway_through_a_stream(client: Any, bedrock: FakeBedrock) -> None:
    bedrock.script.append({"cut": 2, "exception": "throttlingException"})
    stream = client.converse_stream(modelId=MODEL, messages=USER)["stream"]
    seen = []
    # botocore leaves the connection checked out when the stream raises: closing is ours.
    with pytest.raises(EventStreamError) as info, contextlib.closing(stream):
        for event in stream:
            seen.append(event)
    assert len(seen) == 2
    assert info.value.response["Error"]["Code"] == "throttlingException"
