"""The one list of credentials and the keyed masking digest (issue 8 item 3)."""

from __future__ import annotations

import os
import pathlib
import stat

import orjson
import pytest

import dejacache
from dejacache import _secrets
from dejacache.cassettes.redact import PLACEHOLDER, Redactor
from dejacache.cassettes.scan import scan_text


@pytest.fixture
def key_home(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.delenv("DEJACACHE_SECRET_KEY", raising=False)
    monkeypatch.delenv("DEJACACHE_SECRET_KEY_FILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "dejacache" / "secret.key"


@pytest.mark.parametrize("name", [
    "password", "Password", "PASSWORD", "passwd", "api_key", "apiKey", "API-KEY", "x-api-key",
    "X-Api-Key", "authorization", "Authorization", "token", "auth_token", "authToken",
    "secret", "bearer", "aws_secret_access_key", "AWS_SECRET_ACCESS_KEY",
    "aws_access_key_id", "openai_api_key", "OPENAI_API_KEY", "anthropicApiKey", "db_password",
    "stripe_secret_key", "client_secret", "refresh_token", "cookie", "Set-Cookie",
])
def test_credential_names_in_every_spelling(name: str) -> None:
    assert _secrets.is_secret_name(name)


@pytest.mark.parametrize("name", [
    "max_tokens", "tokens", "eos_token", "next_page_token", "request_id", "user", "model",
    "key", "code", "signature", "secretary", "passage", "tokenizer", "author",
])
def test_ordinary_names_are_data(name: str) -> None:
    assert not _secrets.is_secret_name(name)


def test_token_is_a_credential_in_requests_only() -> None:
    assert _secrets.is_secret_name("token")
    assert not _secrets.is_secret_name("token", response=True)  # logprobs
    assert _secrets.is_secret_name("access_token", response=True)


def test_query_only_names() -> None:
    for name in ("key", "sig", "code", "api_key", "X-Amz-Signature", "password"):
        assert _secrets.is_secret_query(name)
    assert not _secrets.is_secret_query("page")


def test_key_file_is_created_once_0600_and_reused(key_home: pathlib.Path) -> None:
    a = _secrets.mask("hunter2")
    assert key_home.exists()
    if os.name == "posix":
        assert stat.S_IMODE(key_home.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_home.parent.stat().st_mode) == 0o700
    assert len(bytes.fromhex(key_home.read_text().strip())) == 64
    _secrets._cache.clear()  # a new process reads the same file
    assert _secrets.mask("hunter2") == a


def test_env_key_wins_and_changes_every_mask(key_home: pathlib.Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from_file = _secrets.mask("hunter2")
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "shared-with-ci")
    from_env = _secrets.mask("hunter2")
    assert from_env != from_file
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "shared-with-ci")
    assert _secrets.mask("hunter2") == from_env


def test_unreadable_key_file_fails_open_with_a_warning(key_home: pathlib.Path) -> None:
    key_home.parent.mkdir(parents=True)
    key_home.write_text("not hex")
    with pytest.warns(dejacache.DejacacheWarning, match="DEJACACHE_SECRET_KEY"):
        m = _secrets.mask("x")
    assert m.startswith("<secret:")


def test_key_file_is_not_in_the_store_directory(key_home: pathlib.Path) -> None:
    store_dir = pathlib.Path(os.environ["DEJACACHE_DIR"])
    assert store_dir not in _secrets.key_path().parents


def test_masks_are_typed_and_never_look_like_secrets_to_scan() -> None:
    assert _secrets.mask(1234) != _secrets.mask("1234")
    text = orjson.dumps({"aws_secret_access_key": _secrets.mask("A" * 40),
                         "authorization": "Bearer " + _secrets.mask("tok" * 10)}).decode()
    assert list(scan_text(text)) == []


def test_secret_shapes_survive_json_escapes() -> None:
    """``\\nsk-...`` is written ``\\\\nsk-...`` in a JSON file: scan and masking still see it."""
    key = "sk-proj-" + "A1b2C3d4" * 5
    text = orjson.dumps({"m": f"line one\n{key}"}).decode()
    assert [f.kind for f in scan_text(text)] == ["openai key"]
    assert key not in _secrets.scrub_request(text.encode()).decode()


def test_redactor_writes_keyed_masks_as_the_placeholder() -> None:
    """Committed files must not depend on the machine (its masking key) that wrote them."""
    tree = {"note": f"was {_secrets.mask('x')}", "password": _secrets.mask("y")}
    assert Redactor().tree(tree) == {"note": f"was {PLACEHOLDER}", "password": PLACEHOLDER}


def test_scrub_request_masks_shapes_anywhere_and_keeps_the_rest() -> None:
    key = "sk-ant-" + "Z" * 30
    canon = orjson.dumps({"a": [f"use {key}", "AKIAABCDEFGHIJKLMNOP"], "b": 1})
    out = orjson.loads(_secrets.scrub_request(canon))
    assert key not in out["a"][0] and out["a"][0].startswith("use <secret:")
    assert out["a"][1].startswith("<secret:") and out["b"] == 1


def test_substitute_keys_a_credential_argument_portably(tmp_path: pathlib.Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cassette recorded on one machine (one masking key, one API key) replays on another
    when the credential is declared with ``substitute=``."""

    @dejacache.cache(name="ask")
    def ask(q: str, api_key: str) -> str:
        return f"answer {q}"

    path = tmp_path / "c.json"
    with dejacache.cassette(path, substitute={"<API_KEY>": "k1-local"}):
        assert ask("q", api_key="k1-local") == "answer q"
    assert "k1-local" not in path.read_text()
    monkeypatch.setenv("DEJACACHE_SECRET_KEY", "the CI machine")
    with dejacache.cassette(path, mode="replay", substitute={"<API_KEY>": "k2-ci"}):
        assert ask("q", api_key="k2-ci") == "answer q"
    # without substitute=, a credential argument is keyed per machine: a miss that says so
    with pytest.raises(dejacache.ReplayMiss, match="differ only in credentials"), \
            dejacache.cassette(path, mode="replay"):
        ask("q", api_key="k1-local")
