"""A replay miss that differs from its nearest recording only in volatile text prints the
rule that would have made it a hit (``_learn/suggest.py``, ``_replay_miss.replay_miss``)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

import dejacache
from dejacache._learn.masking import Rules
from dejacache._learn.rekey import rekey_file
from dejacache._learn.suggest import for_miss


def _req(content: str, **body: Any) -> dict[str, Any]:
    return {"method": "POST", "path": "/v1/chat", "headers": {},
            "body": {"messages": [{"content": content}], **body}}


def test_volatile_only_differences_get_rules() -> None:
    rec = _req("now 2026-01-01T00:00:01Z, nonce=3fa9c2d1e0b41234", ts=1796185683)
    call = _req("now 2030-05-05T10:00:00Z, nonce=77b0e1aa42c9ff00", ts=1796185999)
    rules = for_miss(rec, call, [rec])
    assert rules is not None and "body.ts" in rules
    assert any(r.startswith("re:(?<=nonce=)") for r in rules)


@pytest.mark.parametrize("call", [
    _req("now 2030-05-05T10:00:00Z, about Rome"),  # ordinary text changed too
    _req("now 2026-01-01T00:00:01Z, about Paris", seed=2),  # a plain value appeared
])
def test_anything_else_that_differs_gets_no_rule(call: Any) -> None:
    rec = _req("now 2026-01-01T00:00:01Z, about Paris")
    assert for_miss(rec, call, [rec]) is None


def test_a_plain_value_that_changed_is_never_suggested() -> None:
    rec, call = _req("q", seed=1), _req("q", seed=2)
    assert for_miss(rec, call, [rec]) is None


def test_no_rule_that_would_give_two_recordings_one_key() -> None:
    a = _req("order 6f1c2b9e-7a34-4d2e-9c1a-0b5e8f3d7a21")
    b = _req("order 0d5e9a47-2c1b-4f8e-a6d3-91e7c2b4f580")
    call = _req("order 11111111-1111-4111-8111-111111111111")
    assert for_miss(a, call, [a, b]) is None
    assert for_miss(a, call, [a]) is not None


CALLS: list[str] = []


@dejacache.cache(kind="tool")
def lookup(query: str) -> str:
    CALLS.append(query)
    return f"answer {len(CALLS)}"


def test_the_miss_says_which_rule_and_where_and_the_rule_makes_it_a_hit(
        tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        recorded = lookup("weather as of 2026-01-01T00:00:01.123456 in Paris")
    with pytest.raises(dejacache.ReplayMiss) as info, dejacache.cassette(path, mode="replay"):
        lookup("weather as of 2026-03-09T11:30:00.5 in Paris")
    miss = info.value
    (rule,) = miss.suggestion
    assert rule.startswith("re:") and rule in str(miss)
    assert "would have made it a hit" in str(miss)
    assert "[tool.dejacache]" in str(miss) and "dejacache learn --from-miss" in str(miss)
    rekey_file(path, Rules([rule]))
    with dejacache.cassette(path, mode="replay", volatile=[rule]):
        assert lookup("weather as of 2026-03-09T11:30:00.5 in Paris") == recorded


def test_a_miss_in_ordinary_text_suggests_nothing(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        lookup("weather in Paris")
    with pytest.raises(dejacache.ReplayMiss) as info, dejacache.cassette(path, mode="replay"):
        lookup("weather in Rome")
    assert info.value.suggestion == ()
    assert "would have made it a hit" not in str(info.value)


def test_a_websocket_session_number_is_never_suggested() -> None:
    """Two sessions with one handshake are ``<key>#0`` and ``<key>#1``: a rule masking the
    number would let concurrent sessions answer each other's messages."""
    def msg(n: int) -> dict[str, Any]:
        return {"ws_session": f"3f0c9a7d2b1e4f60a1b2c3d4e5f60718#{n}",
                "body": {"type": "conversation.item.create", "text": "cats"}}

    assert for_miss(msg(0), msg(1), [msg(0)], kind="call") is None


@dejacache.cache(kind="tool")
def signed(note: str) -> str:
    CALLS.append(note)
    return f"answer {len(CALLS)}"


def test_a_timestamp_beside_a_credential_is_named_and_gets_its_rule(
        tmp_path: pathlib.Path) -> None:
    # The key reads alike (<REDACTED> in the file, the same mask live): the timestamp beside
    # it is the difference, not "credentials only", and its rule makes the call a hit.
    key = "sk-ant-" + "Z" * 30
    path = tmp_path / "c.json"
    with dejacache.cassette(path, mode="record"):
        signed(f"{key} at 2026-01-01T10:00:00Z")
    with pytest.raises(dejacache.ReplayMiss) as info, dejacache.cassette(path, mode="replay"):
        signed(f"{key} at 2026-01-02T11:30:00Z")
    miss = str(info.value)
    assert "differ only in credentials" not in miss
    assert "note: differs beside the credential it holds" in miss
    (rule,) = info.value.suggestion
    assert rule.startswith("re:") and rule in miss and "would have made it a hit" in miss
    # (Recorded again with it: rekey cannot key an entry whose credential the file masks.)
    with dejacache.cassette(path, mode="record", volatile=[rule]):
        recorded = signed(f"{key} at 2026-01-01T10:00:00Z")
    with dejacache.cassette(path, mode="replay", volatile=[rule]):
        assert signed(f"{key} at 2026-01-02T11:30:00Z") == recorded
        with pytest.raises(dejacache.ReplayMiss):  # another key is still another call
            signed(f"sk-ant-{'Y' * 30} at 2026-01-02T11:30:00Z")
