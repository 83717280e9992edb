"""Distinct canary secrets through every path, then look for them in everything
dejacache wrote (store files, Redis, cassettes, errors, DEBUG logs, CLI output) and run
``dejacache scan`` over the written files.

Lives with the HTTP tests for the loopback provider fixture; it covers every face.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any

import httpx2
import pytest
from fake_provider import FakeProvider

import dejacache
from dejacache.cassettes.scan import iter_files, scan_file
from dejacache.cli import main as cli_main

# Plain values under credential names, and secret-shaped values anywhere.
CANARIES = {
    "arg_password": "canary-pw-a1",
    "arg_token": "canary-tok-b2",
    "arg_aws_secret": "canaryAwsSecretC3zzzzzzzzzzzzzzzzzzzzzzz",
    "arg_openai_key": "canary-oai-d4",
    "url_api_key": "canary-urlkey-e5",
    "prompt_key": "sk-proj-CANARYf6" + "Q" * 30,
    "aws_id": "AKIACANARYG7ZZZZZ",
    "hdr_auth": "canary-bearer-h8-zzzzzzzzzzzz",
    "hdr_xkey": "canary-xkey-i9",
    "q_api_key": "canary-qkey-j10",
    "q_code": "canary-code-k11",
    "body_password": "canary-bodypw-l12",
    "body_secret": "canary-bodysecret-m13",
    "err_key": "sk-ant-CANARYn14" + "R" * 20,
}
C = CANARIES
BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@dejacache.cache(name="canary.tool")
def tool(q: str, password: str, token: str, config: dict[str, Any], url: str,
         prompt: str) -> str:
    return f"answer to {q}"


def _tool_call(q: str) -> str:
    return tool(q, C["arg_password"], C["arg_token"],
                {"aws_secret_access_key": C["arg_aws_secret"],
                 "nested": [{"openai_api_key": C["arg_openai_key"],
                             "aws_access_key_id": C["aws_id"]}]},
                f"https://api.example.com/v1/x?api_key={C['url_api_key']}&page=2",
                f"my key is {C['prompt_key']} please keep it")


def _http_call(client: httpx2.Client, fake: FakeProvider, n: int) -> Any:
    url = (f"{fake.openai_url}/chat/completions?api_key={C['q_api_key']}"
           f"&code={C['q_code']}")
    body = {**BODY, "password": C["body_password"], "client_secret": C["body_secret"],
            "n": n}
    r = client.post(url, json=body, headers={"Authorization": f"Bearer {C['hdr_auth']}",
                                             "x-api-key": C["hdr_xkey"]})
    return r.json()


def _assert_clean(blob: bytes, where: str) -> None:
    for name, canary in CANARIES.items():
        assert canary.encode() not in blob, f"canary {name} found in {where}"


def test_canaries_reach_nothing_dejacache_writes(
    tmp_path: pathlib.Path, fake: FakeProvider, redis_server: Any,
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG, logger="dejacache")
    errors: list[str] = []
    db = tmp_path / "store.db"

    # 1. decorator arguments and HTTP headers/query/body, into SQLite
    sqlite = dejacache.SQLiteStore(db)
    with dejacache.scope(store=sqlite, mode="auto"), httpx2.Client() as client:
        _tool_call("a")
        _tool_call("a")
        _http_call(client, fake, 1)
        _http_call(client, fake, 1)
    # a replay miss report against the SQLite store
    with dejacache.scope(store=sqlite, mode="replay"), httpx2.Client() as client:
        with pytest.raises(dejacache.ReplayMiss) as miss:
            _tool_call("b")
        errors.append(str(miss.value))
        with pytest.raises(dejacache.ReplayMiss) as miss:
            _http_call(client, fake, 2)
        errors.append(str(miss.value))
    sqlite.close()

    # 2. the same into Redis
    redis = dejacache.RedisStore(redis_server.url, key_prefix="canary", timeout=2.0,
                                 connect_timeout=2.0)
    with dejacache.scope(store=redis, mode="auto"), httpx2.Client() as client:
        _tool_call("a")
        _http_call(client, fake, 1)
    import redis as redis_lib

    raw = redis_lib.Redis.from_url(redis_server.url)
    redis_bytes = b"".join(
        k + (raw.dump(k) or b"") for k in raw.scan_iter(match="*", count=1000))
    raw.close()
    redis.close()

    # 3. a cassette, and its miss report
    cas = tmp_path / "cassettes" / "c.json"
    with dejacache.cassette(cas, mode="record"), httpx2.Client() as client:
        _tool_call("a")
        _http_call(client, fake, 1)
    with dejacache.cassette(cas, mode="replay"), httpx2.Client() as client:
        with pytest.raises(dejacache.ReplayMiss) as miss:
            _tool_call("c")
        errors.append(str(miss.value))

    # 4. an argument that cannot be keyed, whose path holds a secret-shaped dict key
    with pytest.raises(dejacache.UnhashableArgument) as bad:
        dejacache.call_key("ns", "f", (), {"cfg": {C["err_key"]: object()}})
    errors.append(str(bad.value))

    # 5. CLI output over what was written
    capsys.readouterr()
    cli_main(["stats", "--store", f"sqlite:///{db}"])
    cli_main(["show", str(cas)])
    cli_out = capsys.readouterr()
    assert cli_main(["scan", str(tmp_path / "cassettes")]) == 0, capsys.readouterr().out

    files = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert list(iter_files([str(tmp_path / "cassettes")]))
    for f in iter_files([str(tmp_path)]):
        assert scan_file(f) == [], f
    # the paths were really taken: values and masked requests were written
    assert b"answer to a" in files and b"<secret:" in files and b"<REDACTED>" in files
    assert b"answer to a" in redis_bytes
    _assert_clean(files, "files under tmp_path (SQLite, WAL, cassettes)")
    _assert_clean(redis_bytes, "Redis")
    for e in errors:
        _assert_clean(e.encode(), "an error message")
    _assert_clean(caplog.text.encode(), "DEBUG logs")
    _assert_clean((cli_out.out + cli_out.err).encode(), "CLI output")
    assert fake.count() >= 2
