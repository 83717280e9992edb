"""What the boto3 tests run, once recording and once replaying in a fresh process.

``python boto3_cases.py MODE CASSETTE BEDROCK_URL REFUSED_URL`` calls the real
``bedrock-runtime`` client (botocore's HTTP sender on urllib3, SigV4-signed with the dummy
``CREDENTIALS``) inside ``dejacache.cassette(CASSETTE, mode=MODE)`` and prints the answers as
one JSON object; ``REFUSED_URL`` is a port nobody listens on.
"""

from __future__ import annotations

import sys
from typing import Any

import boto3
import orjson
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

import dejacache

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
USER: list[Any] = [{"role": "user", "content": [{"text": "What is the weather?"}]}]
CREDENTIALS = {
    "aws_access_key_id": "AKIAFAKEDEJACACHE01",
    "aws_secret_access_key": "aws-secret-DEJACACHE-0001",
    "aws_session_token": "aws-session-token-DEJACACHE-0002",
}


def client(url: str) -> Any:
    # One attempt: an error must be the first answer, not what botocore's retries made of it.
    return boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=url,
                        config=Config(retries={"total_max_attempts": 1}), **CREDENTIALS)


def cases(url: str, refused: str) -> dict[str, Any]:
    c = client(url)
    out: dict[str, Any] = {}
    r = c.converse(modelId=MODEL, messages=USER)
    meta = r.pop("ResponseMetadata")
    out["converse"] = [r, meta["HTTPStatusCode"], meta["RequestId"]]
    stream = c.converse_stream(modelId=MODEL, messages=USER)["stream"]
    out["converse_stream"] = [e for e in stream]
    try:
        c.converse(modelId=MODEL, messages=[{"role": "user", "content": [{"text": "busy"}]}])
    except ClientError as exc:
        out["throttled"] = [type(exc).__name__, exc.response["Error"]["Code"],
                            exc.response["ResponseMetadata"]["HTTPStatusCode"]]
    c.close()
    down = client(refused)
    try:
        down.converse(modelId=MODEL, messages=USER)
    except EndpointConnectionError as exc:
        out["refused"] = [type(exc).__name__, type(exc.kwargs["error"]).__name__]
    down.close()
    return out


def main(argv: list[str]) -> None:
    mode, path, url, refused = argv
    with dejacache.cassette(path, mode=mode):  # type: ignore[arg-type]
        out = cases(url, refused)
    sys.stdout.write(orjson.dumps(out).decode())


if __name__ == "__main__":
    main(sys.argv[1:])
