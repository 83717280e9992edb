"""What a re-record changes in a cassette's text: the git diff a pull request shows.

Three chat calls are recorded over HTTP against a loopback provider whose answer depends on
the request only; then recorded again (``mode="record"``) with one prompt changed. The
unchanged calls keep their entries byte for byte (``writer._verbatim``); the changed call's
entry changes where its request and answer did (key, checksum, duration, recorded_at, the
prompt, the answer and its volatile headers); nothing else changes but the cross-reference's
bookkeeping at the end of the file: its checksum, that call's key and size, and the byte
offsets of ``xref_at``. ``values`` does not change at all: a request body is never shared
whole and the conversation's last turn (the changed prompt) stays in its entry
(``pack.Packer``).

Measured with this test's calls (a unified diff with git's 3 lines of context, the two
header lines excluded): before, 98 lines in 8 hunks (32 lines changed) for a short prompt and
114 lines (48 changed) for a long one, the request shown again in ``values`` under a new
name; after, 91 lines in 7 hunks (30 changed) for either, every hunk inside the changed entry
or in the cross-reference. (The same re-record through the OpenAI SDK, by ``git diff``: 122 lines in
9 hunks before, 110 in 8 after.) The provider's ``Date`` header is pinned: a real one that
changed between the two recordings is one more hunk (2 changed lines) in the entry.
"""

from __future__ import annotations

import difflib
import hashlib
import pathlib
from typing import Any

import orjson
import pytest

import dejacache
from provider_support import LoopbackHandler, LoopbackProvider

httpx2 = pytest.importorskip("httpx2")

SYSTEM = ("You are a careful assistant for a travel agency. Answer briefly, cite the policy "
          "section, and never invent prices. ") * 2
QUESTIONS = [
    "Can I change my flight to Lisbon after booking it online?",
    "What is the baggage allowance for a child under two years old?",
    "Do you refund hotel bookings cancelled within 24 hours of arrival?",
]
LONG = ("Please read my itinerary below and tell me which of the connections are too short "
        "for the transfer, with the airport rules you relied on. ") * 3


class _Handler(LoopbackHandler):
    def date_time_string(self, timestamp: float | None = None) -> str:
        # One date for every answer: a re-record that crossed a second would change the
        # recorded Date header too (a real change of the answer, one more hunk of 2 changed
        # lines), and the bound below would hold or not by the clock.
        return "Wed, 02 Dec 2026 06:00:00 GMT"

    def do_POST(self) -> None:
        body = self.read_json()
        h = hashlib.sha1(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
        last = body["messages"][-1]["content"]
        self.send_json(200, {
            "id": "chatcmpl-" + h[:20], "object": "chat.completion", "model": body["model"],
            "created": 1_700_000_000 + int(h[:4], 16),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": f"About '{last[:60]}': it depends."}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}},
            {"x-request-id": "req_" + h[:10]})


class Provider(LoopbackProvider):
    """Answers depend on the request only: an unchanged call gets the same answer again."""

    handler = _Handler


@pytest.fixture
def provider() -> Any:
    p = Provider().start()
    yield p
    p.stop()


def _record(path: pathlib.Path, url: str, conversations: list[list[dict[str, str]]]) -> bytes:
    with dejacache.cassette(path, mode="record"), httpx2.Client() as client:
        for messages in conversations:
            r = client.post(url + "/v1/chat/completions",
                            json={"model": "gpt-4o-mini", "messages": messages})
            assert r.status_code == 200
    return path.read_bytes()


def _chat(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def _diff(old: bytes, new: bytes) -> tuple[list[str], list[tuple[int, int]], int]:
    """(the diff's lines, each hunk's old line range, changed lines), as git shows them."""
    a, b = old.decode().splitlines(), new.decode().splitlines()
    lines = list(difflib.unified_diff(a, b, lineterm="", n=3))
    hunks = []
    for line in lines:
        if line.startswith("@@"):
            start, _, count = line.split()[1][1:].partition(",")
            hunks.append((int(start), int(start) + int(count or 1)))
    changed = sum(1 for x in lines if x[:1] in "+-" and not x.startswith(("+++", "---")))
    return lines, hunks, changed


def _entry_lines(data: bytes, i: int) -> tuple[int, int]:
    """The 1-based line range of entry ``i`` in the file."""
    doc = orjson.loads(data)
    first, *_ = doc["xref_at"]
    start = first + sum(doc["xref"]["sizes"][:i]) + 2 * i
    end = start + doc["xref"]["sizes"][i]
    return data[:start].count(b"\n") + 1, data[:end].count(b"\n") + 1


def _xref_lines(data: bytes) -> int:
    return data[:data.rindex(b'\n  "xref": {')].count(b"\n") + 2


@pytest.mark.parametrize("changed", [QUESTIONS[1].replace("a child", "an infant"), LONG],
                         ids=["short-prompt", "long-prompt"])
def test_rerecording_one_of_three_calls_changes_only_its_entry_and_the_bookkeeping(
        tmp_path: pathlib.Path, provider: Any, changed: str) -> None:
    path = tmp_path / "chat.json"
    before = _record(path, provider.url, [_chat(q) for q in QUESTIONS])
    after = _record(path, provider.url, [_chat(q) for q in (QUESTIONS[0], changed,
                                                            QUESTIONS[2])])
    old, new = orjson.loads(before), orjson.loads(after)
    assert old["entries"][0] == new["entries"][0] and old["entries"][2] == new["entries"][2]
    assert old["values"] == new["values"]  # nothing shared was renamed, added or dropped
    lines, hunks, n_changed = _diff(before, after)
    entry = _entry_lines(before, 1)
    outside = [h for h in hunks if not (entry[0] - 3 <= h[0] and h[1] <= entry[1] + 3)]
    assert all(h[0] >= _xref_lines(before) - 3 for h in outside), (hunks, entry)
    tail_old = before[before.rindex(b'\n  "xref": {'):].decode().splitlines()
    tail_new = after[after.rindex(b'\n  "xref": {'):].decode().splitlines()
    tail_changed = sum(1 for x in difflib.ndiff(tail_old, tail_new) if x[:1] in "+-")
    # the checksum, the call's key and size, three offsets of xref_at: removed and added
    assert tail_changed <= 12, tail_changed
    # (the answer's alias tag names the call's key, so it changes with it: one more hunk)
    assert len(lines) <= 102 and n_changed <= 32, (len(lines), n_changed)


def test_a_changed_tool_result_in_a_growing_conversation_changes_only_its_turn(
        tmp_path: pathlib.Path, provider: Any) -> None:
    """An agent's third call resends the two turns before it: those stay shared (their
    values keep their names), and only the third entry and the bookkeeping change."""
    def turns(result: str) -> list[list[dict[str, str]]]:
        history = [{"role": "system", "content": SYSTEM},
                   {"role": "user", "content": LONG}]
        out = [list(history)]
        history += [{"role": "assistant", "content": "I will look the rules up. " * 6},
                    {"role": "tool", "content": "rules: 45 minutes minimum. " * 6}]
        out.append(list(history))
        history += [{"role": "assistant", "content": "Checking your second leg. " * 6},
                    {"role": "tool", "content": result}]
        out.append(list(history))
        return out

    path = tmp_path / "agent.json"
    before = _record(path, provider.url, turns("leg 2: 50 minutes, same terminal. " * 6))
    after = _record(path, provider.url, turns("leg 2: 35 minutes, other terminal. " * 6))
    old, new = orjson.loads(before), orjson.loads(after)
    assert old["entries"][:2] == new["entries"][:2]
    assert old["values"] == new["values"]
    _, hunks, _ = _diff(before, after)
    entry = _entry_lines(before, 2)
    xref = _xref_lines(before)
    assert all(entry[0] - 3 <= h[0] <= entry[1] + 3 or h[0] >= xref - 3 for h in hunks), hunks
