"""Bedrock through the proxy: boto3 signs for the proxy's host with whatever credentials it
holds, and the proxy signs the upstream request again with its own (the region and service
the client signed for); neither key is stored, and the recording replays with the
provider stopped."""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from fake_bedrock import FakeBedrock
from proxy_support import PROXY_AWS_KEY, files_text

from dejacache.errors import ConfigurationError
from dejacache.proxying._aws import Resigner, signed_scope
from dejacache.proxying.handle import ProxySession
from provider_support import DropListener

Open = Callable[..., ProxySession]
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
USER: list[Any] = [{"role": "user", "content": [{"text": "What is the weather?"}]}]
CLIENT_KEY = "AKIACLIENTDEJACACHE1"


@pytest.fixture
def bedrock() -> Iterator[FakeBedrock]:
    server = FakeBedrock().start()
    yield server
    server.stop()


def answers(url: str) -> dict[str, Any]:
    c = boto3.client("bedrock-runtime", region_name="eu-west-3", endpoint_url=url,
                     aws_access_key_id=CLIENT_KEY, aws_secret_access_key="client-secret-1",
                     config=Config(retries={"total_max_attempts": 1}))
    try:
        r = c.converse(modelId=MODEL, messages=USER)
        events = list(c.converse_stream(modelId=MODEL, messages=USER)["stream"])
    finally:
        c.close()
    return {"converse": r["output"], "stream": events}


def test_bedrock_is_signed_again_with_the_proxys_credentials(
        session_for: Open, bedrock: FakeBedrock, proxy_dir: pathlib.Path) -> None:
    s = session_for("bedrock")
    s.route("bedrock", bedrock.url)
    live = answers(s.base_url("bedrock"))
    assert s.close(ok=True)["recorded"] == 2
    for req in bedrock.requests:
        auth = req["headers"]["Authorization"]
        assert f"Credential={PROXY_AWS_KEY}/" in auth and "/eu-west-3/bedrock/" in auth
    port = bedrock.port
    bedrock.stop()
    listener = DropListener(port)
    try:
        r = session_for("bedrock", mode="replay")
        r.route("bedrock", f"http://127.0.0.1:{port}")
        assert answers(r.base_url("bedrock")) == live
        assert r.close(ok=True)["replayed"] == 2
    finally:
        listener.close()
    assert listener.count == 0
    for path, text in files_text(proxy_dir):
        assert CLIENT_KEY not in text and PROXY_AWS_KEY not in text, path


def test_the_scope_is_the_one_the_client_signed_for() -> None:
    auth = ("AWS4-HMAC-SHA256 Credential=AKIAX/20260101/us-west-2/bedrock/aws4_request, "
            "SignedHeaders=host;x-amz-date, Signature=abc")
    assert signed_scope([("Authorization", auth)]) == ("us-west-2", "bedrock")
    assert signed_scope([("authorization", "Bearer sk-x")]) is None
    assert signed_scope([("x-api-key", "k")]) is None


def test_without_botocore_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "botocore.auth", None)  # import_module raises
    with pytest.raises(ConfigurationError, match=r"pip install 'dejacache\[bedrock\]'"):
        Resigner().credentials()


def test_without_credentials_the_error_says_where_they_are_looked_for(
        monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(ConfigurationError, match="found no AWS credentials"):
        Resigner().credentials()


def test_two_upstreams_of_the_users_signed_alike_replay_each_their_own(
        session_for: Open, bedrock: FakeBedrock) -> None:
    # Signed again and streamed as AWS eventstream, keyed by the rule every request through
    # the proxy follows: with the name of an upstream the user named (keys leave the host
    # out, so "east" and "west" asked the same thing would replay each other's answers).
    other = FakeBedrock().start()
    try:
        for _ in range(5):  # its answers numbered on from 6: not "east"'s first ones
            other.next_n()
        routes = {"east": bedrock.url, "west": other.url}
        s = session_for("two-bedrocks", upstreams=routes)
        live = {n: answers(s.base_url(n)) for n in routes}
        assert s.close(ok=True)["recorded"] == 4 and live["east"] != live["west"]
        r = session_for("two-bedrocks", upstreams=routes, mode="replay")
        again = {n: answers(r.base_url(n)) for n in reversed(routes)}
        assert again == live and r.close(ok=True)["replayed"] == 4
        assert len(bedrock.requests) == len(other.requests) == 2
    finally:
        other.stop()
