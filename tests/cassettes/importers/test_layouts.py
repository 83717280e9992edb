"""``dejacache import`` of the cassette layouts real suites keep, replayed by the real SDKs.

Synthetic files in each layout the public suites use: langchain_tests' gzipped YAML with
``requests`` / ``responses`` lists and every header ``**REDACTED**`` (Bedrock Converse and
ConverseStream, replayed by boto3), vcrpy's JSON serializer gzipped (a Gemini JSON-array
stream, read by httpx as llm-gemini reads it), and an SSE stream whose Content-Type was blanked
(replayed by the OpenAI SDK). Each is imported, then replayed with nothing listening, and every
call's usage is read as a fresh recording's would be.
"""

from __future__ import annotations

import gzip
import json
import pathlib
from typing import Any

import orjson
import pytest

yaml = pytest.importorskip("yaml")

import dejacache  # noqa: E402
from dejacache.cli import main  # noqa: E402
from dejacache.http import eventstream  # noqa: E402

REDACTED = ["**REDACTED**"]
BEDROCK = "https://bedrock-runtime.us-east-1.amazonaws.com"
MODEL = "us.anthropic.claude-sonnet-5"
USER: list[Any] = [{"role": "user", "content": [{"text": "What is the weather?"}]}]
CREDENTIALS = {"aws_access_key_id": "AKIAFAKEDEJACACHE01",
               "aws_secret_access_key": "aws-secret-DEJACACHE-0001"}


def _frame(kind: str, data: dict[str, Any]) -> bytes:
    return eventstream.encode(eventstream.Message(
        {":event-type": kind, ":content-type": "application/json", ":message-type": "event"},
        orjson.dumps(data)))


def _converse_stream_body() -> bytes:
    return b"".join([
        _frame("messageStart", {"role": "assistant"}),
        _frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Sunny"}}),
        _frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " today."}}),
        _frame("contentBlockStop", {"contentBlockIndex": 0}),
        _frame("messageStop", {"stopReason": "end_turn"}),
        _frame("metadata", {"usage": {"inputTokens": 12, "outputTokens": 4, "totalTokens": 16},
                            "metrics": {"latencyMs": 321}}),
    ])


def _converse_body() -> bytes:
    return orjson.dumps({
        "output": {"message": {"role": "assistant", "content": [{"text": "It is sunny."}]}},
        "stopReason": "end_turn", "metrics": {"latencyMs": 400},
        "usage": {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17}})


def _langchain_file(path: pathlib.Path) -> None:
    """As langchain_tests' CustomSerializer writes it: YAML of two lists, gzipped, every
    header blanked by the suite's before_record hooks."""
    body = orjson.dumps({"messages": USER})
    heads = {"Content-Type": REDACTED, "Authorization": REDACTED, "X-Amz-Date": REDACTED}
    doc = {
        "requests": [
            {"method": "POST", "uri": f"{BEDROCK}/model/{MODEL}/converse", "body": body,
             "headers": heads},
            {"method": "POST", "uri": f"{BEDROCK}/model/{MODEL}/converse-stream",
             "body": body, "headers": heads},
        ],
        "responses": [
            {"status": {"code": 200, "message": "OK"},
             "headers": {"Content-Type": REDACTED, "x-amzn-RequestId": REDACTED},
             "body": {"string": _converse_body()}},
            {"status": {"code": 200, "message": "OK"},
             "headers": {"Content-Type": REDACTED, "Content-Encoding": REDACTED},
             "body": {"string": _converse_stream_body()}},
        ],
    }
    path.write_bytes(gzip.compress(yaml.safe_dump(doc).encode()))


def _import(src: pathlib.Path, out: pathlib.Path, capsys: pytest.CaptureFixture[str],
            *extra: str) -> str:
    assert main(["import", str(src), "-o", str(out), *extra]) == 0
    return capsys.readouterr().out


def _usages(out: pathlib.Path) -> list[Any]:
    return [e.get("usage") for e in json.loads(out.read_text())["entries"]]


def test_langchain_gzip_lists_with_redacted_headers_replay_through_boto3(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    boto3 = pytest.importorskip("boto3")
    src = tmp_path / "test_agent_loop_streaming[v0].yaml.gz"
    _langchain_file(src)
    out = tmp_path / "test_agent_loop_streaming[v0].json"
    text = _import(src, out, capsys)
    assert "converted: 2 call(s)" in text and "skipped: 0" in text
    assert "bedrock.converse" in text and "bedrock.converse_stream" in text
    # tokens read from the JSON answer and from the eventstream's metadata event
    assert [u and u.get("total_tokens") for u in _usages(out)] == [17, 16]
    client = boto3.client("bedrock-runtime", region_name="us-east-1", **CREDENTIALS)
    with dejacache.cassette(out, mode="replay") as tape:
        whole = client.converse(modelId=MODEL, messages=USER)
        events = list(client.converse_stream(modelId=MODEL, messages=USER)["stream"])
    assert whole["output"]["message"]["content"][0]["text"] == "It is sunny."
    assert whole["usage"]["totalTokens"] == 17
    text_out = "".join(e["contentBlockDelta"]["delta"]["text"] for e in events
                       if "contentBlockDelta" in e)
    assert text_out == "Sunny today."
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 4
    assert tape.counters.replayed == 2 and not tape.misses
    assert "**REDACTED**" not in out.read_text().split('"headers"')[0]


def test_gzipped_vcrpy_json_with_a_gemini_json_array_stream(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("httpx")
    chunks = [
        {"candidates": [{"content": {"parts": [{"text": "Pel"}], "role": "model"}}],
         "usageMetadata": {"promptTokenCount": 9}, "modelVersion": "gemini-3.6-flash"},
        {"candidates": [{"content": {"parts": [{"text": "ly"}], "role": "model"},
                         "finishReason": "STOP"}],
         "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 2,
                           "totalTokenCount": 11}, "modelVersion": "gemini-3.6-flash"},
    ]
    url = ("https://generativelanguage.googleapis.com/v1beta/models/gemini-flash-latest"
           ":streamGenerateContent")
    body = {"contents": [{"role": "user", "parts": [{"text": "Name a pelican"}]}]}
    doc = {"version": 1, "interactions": [{
        "request": {"method": "POST", "uri": url, "body": json.dumps(body),
                    "headers": {"content-type": ["application/json"],
                                "x-goog-api-key": ["AIza-FAKE-KEY"]}},
        "response": {"status": {"code": 200, "message": "OK"},
                     "headers": {"Content-Type": ["application/json; charset=UTF-8"]},
                     "body": {"string": json.dumps(chunks, indent=1)}}}]}
    src = tmp_path / "test_prompt.json.gz"
    src.write_bytes(gzip.compress(json.dumps(doc).encode()))
    out = tmp_path / "test_prompt.json"
    assert "converted: 1 call(s)" in _import(src, out, capsys)
    entry = json.loads(out.read_text())["entries"][0]
    assert entry["usage"] == {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    with dejacache.cassette(out, mode="replay") as tape, \
            dejacache.http_client(library="httpx") as client:
        r = client.post(url, json=body, headers={"x-goog-api-key": "another-key"})
    assert [c["candidates"][0]["content"]["parts"][0]["text"] for c in r.json()] == ["Pel", "ly"]
    assert tape.counters.replayed == 1
    assert tape.counters.tokens_saved == 11


def test_an_sse_stream_whose_content_type_was_blanked_streams_again(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    openai = pytest.importorskip("openai")
    events = [
        {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o-mini", "created": 1,
         "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]},
        {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o-mini", "created": 1,
         "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
        {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o-mini", "created": 1,
         "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                  "total_tokens": 7}},
    ]
    sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    req = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}],
           "stream": True, "stream_options": {"include_usage": True}}
    doc = {"interactions": [{
        "request": {"method": "POST", "uri": "https://api.openai.com/v1/chat/completions",
                    "body": json.dumps(req),
                    # urllib3's stub (boto3, requests) kept some values as bytes
                    "headers": {"Content-Type": REDACTED, "amz-sdk-request": [b"attempt=1"]}},
        "response": {"status": {"code": 200, "message": "OK"},
                     "headers": {"Content-Type": REDACTED}, "body": {"string": sse}}}]}
    src = tmp_path / "test_stream.yaml"
    src.write_text(yaml.safe_dump(doc))
    out = tmp_path / "test_stream.json"
    _import(src, out, capsys, "--match", "vcr")
    stored = json.loads(out.read_text())["entries"][0]
    assert stored["usage"]["total_tokens"] == 7
    assert "events" in json.dumps(stored["response"]) or json.loads(out.read_text())["values"]
    client = openai.OpenAI(api_key="sk-placeholder", base_url="https://api.openai.com/v1",
                           http_client=dejacache.http_client(), max_retries=0)
    with dejacache.cassette(out, mode="replay") as tape:
        stream = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True})
        chunks = list(stream)
    assert type(stream).__name__ == "Stream"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 7
    assert tape.counters.replayed == 1
