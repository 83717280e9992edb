"""The Bedrock provider and the exchange's eventstream handling, against what boto3 really
sends and the Bedrock fake really answers, below any transport.

botocore's public ``before-send`` event hands us each signed request; the relay here sends it
to the fake over urllib3, keeps the answer as the exchange stores it (``response_value``), and
hands botocore the answer rebuilt from that stored value (``body_bytes``, the events framed
again one per chunk), as a replay would. So every test checks both what is read from a real
answer (endpoint, model, usage, ids) and that botocore parses the rebuilt answer into the
same objects and errors.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest

boto3 = pytest.importorskip("boto3")

import urllib3  # noqa: E402
from botocore.awsrequest import AWSResponse  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.exceptions import ClientError, EventStreamError  # noqa: E402
from fake_bedrock import FakeBedrock  # noqa: E402

from dejacache.cassettes.prices import estimate_dollars  # noqa: E402
from dejacache.cassettes.trajectory import step_kind  # noqa: E402
from dejacache.http.eventstream import decode_all, to_stored  # noqa: E402
from dejacache.http.exchange import (  # noqa: E402
    body_bytes,
    canonical_request,
    replay_headers,
    response_value,
)
from dejacache.http.providers import detect  # noqa: E402
from dejacache.http.providers._base import END, FINISHING, IN_PROGRESS  # noqa: E402
from dejacache.http.providers.bedrock import PROVIDER, Bedrock, split_path  # noqa: E402
from dejacache.http.sse import event_bytes  # noqa: E402

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
USER: list[Any] = [{"role": "user", "content": [{"text": "hi"}]}]
TOOLS = {"tools": [{"toolSpec": {"name": "get_weather", "description": "Weather in a city",
                                 "inputSchema": {"json": {"type": "object"}}}}]}
ANTHROPIC = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
             "messages": [{"role": "user", "content": "hi"}]}
SECRETS = ("AKIAFAKEFAKEFAKE", "fake-secret", "fake-session-token")


class _Raw:
    """What botocore reads a body from (urllib3's response: ``stream``, ``read``)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks
        self._buf = io.BytesIO(b"".join(chunks))

    def stream(self, amt: int | None = None, decode_content: bool = True) -> Iterator[bytes]:
        yield from self._chunks

    def read(self, amt: int | None = None, decode_content: bool = True) -> bytes:
        return self._buf.read(amt)

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class Relay:
    """botocore ``before-send`` hook: live to the fake, answered from the stored value."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.pool = urllib3.PoolManager()

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        url = urlsplit(request.url)
        headers = {k: v.decode() if isinstance(v, bytes) else v
                   for k, v in request.headers.items()}
        body = request.body or b""
        body = body.encode() if isinstance(body, str) else bytes(body)
        provider = detect(url.hostname or "", url.path, headers)
        resp = self.pool.request(request.method, request.url, body=body, headers=headers,
                                 preload_content=False)
        raw = b"".join(resp.stream())
        resp.release_conn()
        ctype = resp.headers.get("content-type", "")
        value = response_value(resp.status, resp.headers.items(), ctype, provider, body=raw)
        canonical, _ = canonical_request(request.method, url.path, [], body,
                                         headers.get("Content-Type", ""), provider, None, ())
        # A stored value survives the cassette's JSON (sorted keys) unchanged.
        value = orjson.loads(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
        self.calls.append({"headers": headers, "provider": provider, "raw": raw,
                           "value": value, "canonical": canonical,
                           "name": provider.endpoint(url.hostname or "", url.path)})
        events = value.get("events")
        chunks = ([event_bytes(ev) for _, ev in events] if events is not None
                  else [body_bytes(value)])
        return AWSResponse(request.url, value["status"], replay_headers(value["headers"]),
                           _Raw(chunks))


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    server = FakeBedrock(chunk_delay=0.001).start()
    yield server
    server.stop()


@pytest.fixture
def relay() -> Relay:
    return Relay()


@pytest.fixture
def client(bedrock: FakeBedrock, relay: Relay) -> Iterator[Any]:
    c = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=bedrock.url,
                     aws_access_key_id=SECRETS[0], aws_secret_access_key=SECRETS[1],
                     aws_session_token=SECRETS[2],
                     config=Config(retries={"total_max_attempts": 1}))
    c.meta.events.register("before-send.bedrock-runtime", relay)
    yield c
    c.close()


def _no_secrets(call: dict[str, Any]) -> None:
    stored = orjson.dumps(call["value"]) + call["canonical"]
    for s in SECRETS:
        assert s.encode() not in stored


# ---------------------------------------------------------------- Converse


def test_converse_endpoint_model_usage_and_key(client: Any, relay: Relay) -> None:
    first = client.converse(modelId=MODEL, messages=USER)
    again = client.converse(modelId=MODEL, messages=USER)
    a, b = relay.calls
    assert isinstance(a["provider"], Bedrock) and a["name"] == "bedrock.converse"
    assert a["value"]["model"] == MODEL
    usage = a["value"]["usage"]
    api = first["usage"]
    assert usage == {"input_tokens": api["inputTokens"], "output_tokens": api["outputTokens"],
                     "total_tokens": api["totalTokens"]}
    assert first["output"] == a["value"]["json"]["output"]  # parsed from the rebuilt body
    # Signed twice, a different x-amz-date and invocation id: the same key all the same.
    assert a["headers"]["amz-sdk-invocation-id"] != b["headers"]["amz-sdk-invocation-id"]
    assert a["canonical"] == b["canonical"]
    assert b"amz" not in a["canonical"].lower() and b"authorization" not in a["canonical"]
    assert first["output"] != again["output"]  # the fake varies: these were two live calls
    _no_secrets(a)


def test_converse_tool_use_id_is_an_alias_id(client: Any, relay: Relay) -> None:
    out = client.converse(modelId=MODEL, messages=USER, toolConfig=TOOLS)
    use = out["output"]["message"]["content"][0]["toolUse"]
    assert relay.calls[0]["value"]["ids"] == [use["toolUseId"]]


def test_converse_stream_recorded_as_events_and_rebuilt_byte_exact(client: Any,
                                                                   relay: Relay) -> None:
    events = list(client.converse_stream(modelId=MODEL, messages=USER)["stream"])
    (call,) = relay.calls
    value = call["value"]
    assert call["name"] == "bedrock.converse_stream"
    assert "bytes" not in value and "text" not in value
    stored = [ev for _, ev in value["events"]]
    assert [h[1] for ev in stored for h in ev["headers"] if h[0] == ":event-type"] == [
        next(iter(e)) for e in events]
    assert body_bytes(value) == call["raw"]  # re-framed byte for byte
    assert json.loads(stored[0]["payload"])["role"] == "assistant"  # readable
    meta = events[-1]["metadata"]["usage"]
    assert value["usage"] == {"input_tokens": meta["inputTokens"],
                              "output_tokens": meta["outputTokens"],
                              "total_tokens": meta["totalTokens"]}
    assert value["model"] == MODEL
    stages = [PROVIDER.stage(ev) for ev in stored]
    assert stages[-2:] == [FINISHING, END] and set(stages[:-2]) == {IN_PROGRESS}
    _no_secrets(call)


def test_converse_stream_tool_call_ids(client: Any, relay: Relay) -> None:
    events = list(client.converse_stream(modelId=MODEL, messages=USER,
                                         toolConfig=TOOLS)["stream"])
    start = next(e["contentBlockStart"]["start"]["toolUse"] for e in events
                 if "contentBlockStart" in e)
    assert relay.calls[0]["value"]["ids"] == [start["toolUseId"]]


def test_an_exception_midway_is_kept_and_raised_again(client: Any, relay: Relay,
                                                      bedrock: FakeBedrock) -> None:
    bedrock.script.append({"cut": 2, "exception": "throttlingException"})
    stream = client.converse_stream(modelId=MODEL, messages=USER)["stream"]
    seen = []
    with pytest.raises(EventStreamError) as info:
        for event in stream:
            seen.append(event)
    assert len(seen) == 2
    assert info.value.response["Error"]["Code"] == "throttlingException"
    last = relay.calls[0]["value"]["events"][-1][1]
    assert [":message-type", "exception"] in last["headers"]
    assert PROVIDER.stage(last) == END


@pytest.mark.parametrize(("status", "code"), [(429, "ThrottlingException"),
                                              (500, "InternalServerException")])
def test_errors_rebuilt_are_botocores_own(client: Any, relay: Relay, bedrock: FakeBedrock,
                                          status: int, code: str) -> None:
    bedrock.script.append({"status": status})
    with pytest.raises(getattr(client.exceptions, code)) as info:
        client.converse(modelId=MODEL, messages=USER)
    assert isinstance(info.value, ClientError)
    value = relay.calls[0]["value"]
    assert value["status"] == status and "usage" not in value and "message" in value["json"]
    assert ["x-amzn-errortype", f"{code}:http://internal.amazon.com/coral/"
            "com.amazon.bedrock/"] in value["headers"]


# ---------------------------------------------------------------- InvokeModel


def test_invoke_model_anthropic_body(client: Any, relay: Relay) -> None:
    resp = client.invoke_model(modelId=MODEL, body=json.dumps(ANTHROPIC))
    msg = json.loads(resp["body"].read())
    value = relay.calls[0]["value"]
    assert relay.calls[0]["name"] == "bedrock.invoke_model"
    assert value["json"] == msg
    assert value["usage"] == msg["usage"]  # already Anthropic's names
    assert value["ids"] == [msg["id"]]
    assert value["model"] == MODEL  # the Bedrock id, not the body's "claude-3-haiku-..."


def test_invoke_model_with_response_stream(client: Any, relay: Relay) -> None:
    resp = client.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(ANTHROPIC))
    events = [json.loads(e["chunk"]["bytes"]) for e in resp["body"]]
    (call,) = relay.calls
    value = call["value"]
    assert call["name"] == "bedrock.invoke_model_with_response_stream"
    assert body_bytes(value) == call["raw"]
    assert value["usage"] == {"input_tokens": events[0]["message"]["usage"]["input_tokens"],
                              "output_tokens": events[-2]["usage"]["output_tokens"]}
    assert value["ids"] == [events[0]["message"]["id"]]
    stages = [PROVIDER.stage(ev) for _, ev in value["events"]]
    assert stages[-2:] == [FINISHING, END]


def test_invoke_stream_usage_falls_back_to_bedrock_metrics() -> None:
    import base64

    chunk = {"bytes": base64.b64encode(orjson.dumps({
        "type": "message_stop", "amazon-bedrock-invocationMetrics": {
            "inputTokenCount": 7, "outputTokenCount": 3}})).decode()}
    assert PROVIDER.usage(None, [chunk]) == {"input_tokens": 7, "output_tokens": 3}


def test_nova_invoke_body_uses_converse_names() -> None:
    body = {"output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
            "usage": {"inputTokens": 5, "outputTokens": 2, "totalTokens": 7,
                      "cacheReadInputTokens": 4, "cacheWriteInputTokens": 1}}
    assert PROVIDER.usage(body, []) == {
        "input_tokens": 5, "output_tokens": 2, "total_tokens": 7,
        "cache_read_input_tokens": 4, "cache_creation_input_tokens": 1}


def test_a_damaged_eventstream_body_is_kept_whole() -> None:
    from fake_bedrock import frame_event

    good = frame_event("messageStart", {"role": "assistant"})
    bad = good + bytearray(good[:-1]) + bytes([good[-1] ^ 1])
    ct = "application/vnd.amazon.eventstream"
    prov = Bedrock(MODEL)
    value = response_value(200, [("content-type", ct)], ct, prov, body=bytes(bad))
    assert value["bytes"] == bad and "events" not in value
    assert body_bytes(value) == bad
    ok = response_value(200, [("content-type", ct)], ct, prov, body=good)
    assert ok["events"] == [[0.0, to_stored(decode_all(good)[0])]]


# ---------------------------------------------------------------- matching and names


AWS_HEADERS = {"X-Amz-Date": "20261126T200000Z",
               "Authorization": "AWS4-HMAC-SHA256 Credential=AKIA.../bedrock/aws4_request"}


@pytest.mark.parametrize(("host", "path", "headers", "matched"), [
    ("127.0.0.1", "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse", AWS_HEADERS,
     True),
    ("127.0.0.1", "/model/m/converse", {"amz-sdk-invocation-id": "x"}, True),
    ("127.0.0.1", "/model/m/converse", {"authorization": "Bearer abc"}, False),
    ("bedrock-runtime.us-east-1.amazonaws.com", "/model/m/invoke", {}, True),
    ("127.0.0.1", "/v1/chat/completions", AWS_HEADERS, False),
    ("127.0.0.1", "/model/", AWS_HEADERS, False),
])
def test_matches(host: str, path: str, headers: dict[str, str], matched: bool) -> None:
    assert (detect(host, path, headers).name == "bedrock") is matched


@pytest.mark.parametrize(("path", "model", "name"), [
    ("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
     "anthropic.claude-3-haiku-20240307-v1:0", "bedrock.converse"),
    ("/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.amazon.nova-lite"
     "-v1%3A0/converse-stream",
     "arn:aws:bedrock:us-east-1:123:inference-profile/us.amazon.nova-lite-v1:0",
     "bedrock.converse_stream"),
    ("/proxy/model/amazon.nova-micro-v1%3A0/invoke", "amazon.nova-micro-v1:0",
     "bedrock.invoke_model"),
    ("/model/m/count-tokens", "m", "bedrock.count_tokens"),
    # httpx hands the path over percent-decoded: an ARN's "/" is a "/" again
    ("/model/arn:aws:bedrock:us-east-1:123:inference-profile/us.amazon.nova-lite-v1:0/"
     "converse", "arn:aws:bedrock:us-east-1:123:inference-profile/us.amazon.nova-lite-v1:0",
     "bedrock.converse"),
])
def test_model_and_endpoint_from_the_path(path: str, model: str, name: str) -> None:
    assert split_path(path) == (model, path.rpartition("/")[2])
    prov = detect("127.0.0.1", path, AWS_HEADERS)
    assert prov.model(None, []) == model and prov.endpoint("127.0.0.1", path) == name
    assert PROVIDER.model(None, []) is None  # the shared instance knows no model


def test_the_stream_endpoints_say_so() -> None:
    assert PROVIDER.asks_stream("/model/m/converse-stream", {"messages": []})
    assert PROVIDER.asks_stream("/model/m/invoke-with-response-stream", None)
    assert not PROVIDER.asks_stream("/model/m/converse", {"stream": True})
    assert not PROVIDER.asks_stream("/model/m/invoke", None)


def test_chunk_by_chunk_recording_gives_the_whole_body_value(bedrock: FakeBedrock) -> None:
    """What a recorder fed live chunks builds (``splitter_for`` + ``response_value(events=)``)
    is what the whole-body path stores, and the provider's stages end where the body ends."""
    from dejacache.http.sse import splitter_for

    ct = "application/vnd.amazon.eventstream"
    with urllib3.PoolManager() as pool:
        resp = pool.request("POST", f"{bedrock.url}/model/{MODEL}/converse-stream",
                            json={"messages": USER}, preload_content=False)
        chunks = list(resp.read_chunked())  # as they came off the wire, one message each
        resp.release_conn()
    assert len(chunks) > 5
    splitter = splitter_for(ct)
    prov = Bedrock(MODEL)
    events: list[list[Any]] = []
    stage = IN_PROGRESS
    for chunk in chunks:
        for ev in splitter.feed(chunk):
            events.append([0.0, ev])
            stage = max(stage, prov.stage(ev))
    assert splitter.flush() == [] and stage == END
    headers = [("content-type", ct)]
    live = response_value(200, headers, ct, prov, events=events)
    whole = response_value(200, headers, ct, prov, body=b"".join(chunks))
    assert live == whole and body_bytes(live) == b"".join(chunks)


def test_requestmetadata_is_not_keyed() -> None:
    prov = Bedrock(MODEL)
    path = "/model/m/converse"

    def key(meta: str) -> bytes:
        body = orjson.dumps({"messages": USER, "requestMetadata": {"run": meta}})
        return canonical_request("POST", path, [], body, "application/json", prov, None, ())[0]

    assert key("a") == key("b")


def test_bedrock_calls_are_model_steps_and_priced() -> None:
    assert step_kind("http", "bedrock.converse") == "model"
    usage = {"input_tokens": 1_000_000, "output_tokens": 1_000_000}
    assert estimate_dollars(usage, MODEL) == pytest.approx(0.25 + 1.25)
    assert estimate_dollars(usage, "us." + MODEL) == pytest.approx(1.50)
    arn = "arn:aws:bedrock:us-east-1:123:inference-profile/eu.amazon.nova-micro-v1:0"
    assert estimate_dollars(usage, arn) == pytest.approx(0.035 + 0.14)
    assert estimate_dollars(usage, "amazon.nova-pro-v1:0") == pytest.approx(0.80 + 3.20)
    assert estimate_dollars(usage, "xx.unknown-model") == 0.0
