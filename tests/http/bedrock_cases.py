"""The Bedrock agent the end-to-end tests run, once recording and once replaying in a fresh
process: ``python bedrock_cases.py MODE CASSETTE BEDROCK_URL`` prints what boto3 returned as
one JSON object.

Every ``bedrock-runtime`` operation dejacache knows, through the real client (botocore on
urllib3, SigV4-signed with dummy keys and a session token): Converse (text, and a tool round
trip feeding the tool-use id back), ConverseStream (parsed events, and the raw chunks of the
eventstream), InvokeModel and InvokeModelWithResponseStream with an Anthropic body, a
throttled Converse (429), a failing InvokeModel (500), and a ConverseStream that fails midway
with an exception message. The fake's script (``SCRIPT``) bends the calls in this order.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sys
from typing import Any

import boto3
import orjson
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError

import dejacache

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
NOVA = "amazon.nova-micro-v1:0"
USER: list[Any] = [{"role": "user", "content": [{"text": "What is the weather in Paris?"}]}]
TOOLS = {"tools": [{"toolSpec": {"name": "get_weather", "description": "Weather in a city",
                                 "inputSchema": {"json": {"type": "object"}}}}]}
ANTHROPIC = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
             "messages": [{"role": "user", "content": "Say hello"}]}
CREDENTIALS = {
    "aws_access_key_id": "AKIABEDROCKCASES0001",
    "aws_secret_access_key": "bedrock-cases-secret-key-0002",
    "aws_session_token": "bedrock-cases-session-token-0003",
}
# One entry per request, in the order cases() makes them ({} answers normally).
SCRIPT: list[dict[str, Any]] = [
    {}, {}, {}, {}, {}, {}, {},
    {"status": 429},
    {"status": 500},
    {"cut": 2, "exception": "throttlingException"},
]


def _meta(resp: dict[str, Any]) -> list[Any]:
    meta = resp.pop("ResponseMetadata")
    return [meta["HTTPStatusCode"], meta["RequestId"]]


def _error(exc: ClientError) -> list[Any]:
    # An eventstream exception message has no HTTP metadata: the answer itself was a 200.
    meta = exc.response.get("ResponseMetadata", {})
    return [type(exc).__name__, exc.response["Error"]["Code"],
            exc.response["Error"]["Message"], meta.get("HTTPStatusCode")]


def _converse(c: Any, out: dict[str, Any]) -> None:
    r = c.converse(modelId=MODEL, messages=USER)
    out["converse"] = [r, _meta(r)]
    msgs: list[Any] = list(USER)
    first = c.converse(modelId=NOVA, messages=msgs, toolConfig=TOOLS)
    use = first["output"]["message"]["content"][0]["toolUse"]
    msgs += [first["output"]["message"],
             {"role": "user", "content": [{"toolResult": {
                 "toolUseId": use["toolUseId"], "content": [{"text": "sunny"}]}}]}]
    final = c.converse(modelId=NOVA, messages=msgs, toolConfig=TOOLS)
    out["tool_round_trip"] = [first, final, _meta(first), _meta(final)]


def _converse_stream(c: Any, out: dict[str, Any]) -> None:
    resp = c.converse_stream(modelId=MODEL, messages=USER)
    out["converse_stream"] = [list(resp["stream"]), _meta(resp)]
    # The same call again, read below botocore's parser: the urllib3 response's chunks as
    # they come (stream(None); a replay hands back one framed message per chunk).
    # _raw_stream is botocore's name for the response it parses; read only to see the wire.
    raw = c.converse_stream(modelId=MODEL, messages=USER)["stream"]._raw_stream
    out["converse_stream_chunks"] = [base64.b64encode(ch).decode() for ch in raw.stream(None)]
    raw.release_conn()


def _invoke(c: Any, out: dict[str, Any]) -> None:
    resp = c.invoke_model(modelId=MODEL, body=json.dumps(ANTHROPIC))
    out["invoke_model"] = [json.loads(resp.pop("body").read()), _meta(resp), resp]
    resp = c.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(ANTHROPIC))
    out["invoke_stream"] = [[json.loads(e["chunk"]["bytes"]) for e in resp.pop("body")],
                            _meta(resp), resp]


def _failures(c: Any, out: dict[str, Any]) -> None:
    try:
        c.converse(modelId=MODEL, messages=USER)
    except ClientError as exc:
        out["throttled"] = _error(exc)
    try:
        c.invoke_model(modelId=MODEL, body=json.dumps(ANTHROPIC))
    except ClientError as exc:
        out["server_error"] = _error(exc)
    stream = c.converse_stream(modelId=MODEL, messages=USER)["stream"]
    seen: list[Any] = []
    # botocore leaves the connection checked out when the stream raises: closing is ours.
    with contextlib.closing(stream):
        try:
            for event in stream:
                seen.append(event)
        except EventStreamError as exc:
            out["midway"] = [seen, _error(exc)]


def cases(url: str) -> dict[str, Any]:
    # One attempt: an error must be the first answer, not what botocore's retries made of it.
    c = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=url,
                     config=Config(retries={"total_max_attempts": 1}), **CREDENTIALS)
    out: dict[str, Any] = {}
    try:
        _converse(c, out)
        _converse_stream(c, out)
        _invoke(c, out)
        _failures(c, out)
    finally:
        c.close()
    return out


def main(argv: list[str]) -> None:
    mode, path, url = argv
    with dejacache.cassette(path, mode=mode) as tape:  # type: ignore[arg-type]
        out = cases(url)
    counters = tape.counters
    # Printed apart from the answers, which must be the same in both runs.
    summary = {"replayed": counters.replayed, "tokens_saved": counters.tokens_saved,
               "dollars_saved": counters.dollars_saved}
    sys.stdout.write(orjson.dumps({"answers": out, "tape": summary}, default=str).decode())


if __name__ == "__main__":
    main(sys.argv[1:])
