"""The smallest set of rules explaining two recordings, none merging calls answered
differently (``_learn/rules.py``, checked by ``_learn/recordings.py``)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from dejacache._core.shapes import shape_of
from dejacache._learn.answers import answer_of
from dejacache._learn.diffs import differences
from dejacache._learn.masking import Rules, canonical, masked
from dejacache._learn.recordings import Call, Recordings, observe
from dejacache._learn.rules import CallRef, Observed, propose


def _http(content: str, **body: Any) -> dict[str, Any]:
    return {"method": "POST", "path": "/v1/chat/completions", "headers": {},
            "body": {"model": "m", "messages": [{"role": "user", "content": content}], **body}}


def _obs(i: int, a: Any, b: Any, kind: str = "http") -> Observed:
    return Observed(CallRef("c.json", i, "openai.chat"), kind, a, b, differences(a, b))


def _call(i: int, request: Any, answer: str) -> Call:
    key = hashlib.sha256(canonical(request)).hexdigest()[:32]
    return Call(CallRef("c.json", i, "openai.chat"), "default", "http", key, request,
                answer.encode())


def _none(rules: Rules) -> str | None:
    return None


def test_timestamps_in_many_calls_take_one_rule() -> None:
    observed = [_obs(i, _http(f"now {t1} q{i}"), _http(f"now {t2} q{i}"))
                for i, (t1, t2) in enumerate([("2026-01-01T00:00:01Z", "2026-01-01T00:09:01Z"),
                                              ("2026-01-01T00:00:02Z", "2026-01-02T00:00:00Z")])]
    p = propose(observed, _none)
    assert len(p.rules) == 1 and p.rules[0].what == "timestamp"
    assert [f for _, f in p.rules[0].explains] == ["body.messages[0].content"] * 2
    assert (p.differing_before, p.differing_after) == (2, 0)
    assert (p.volatile_seen, p.volatile_masked) == (2, 2)


def test_a_rule_that_would_merge_differently_answered_calls_is_refused() -> None:
    # Two orders, each answered for itself, differ only in the order's UUID; a request id
    # (volatile) differs between the runs. Masking every UUID would give both orders one key.
    o1, o2 = "6f1c2b9e-7a34-4d2e-9c1a-0b5e8f3d7a21", "0d5e9a47-2c1b-4f8e-a6d3-91e7c2b4f580"
    ra = ["11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"]
    rb = ["33333333-3333-4333-8333-333333333333", "44444444-4444-4444-8444-444444444444"]
    first = [_http(f"order {o} request id: {r}") for o, r in zip((o1, o2), ra, strict=True)]
    second = [_http(f"order {o} request id: {r}") for o, r in zip((o1, o2), rb, strict=True)]
    rec = Recordings(observed=[_obs(i, a, b) for i, (a, b) in enumerate(zip(first, second,
                                                                            strict=True))])
    rec.files = [[_call(0, first[0], "ships today"), _call(1, first[1], "lost")]]
    p = propose(rec.observed, rec.check)
    (refused,) = p.refused
    assert refused.what == "UUID" and "answered differently" in refused.reason
    (rule,) = p.texts
    assert rule.startswith("re:(?<=id: )")  # anchored: the orders' UUIDs stay keyed
    r = Rules(p.texts)
    assert canonical(masked(first[0], "http", r)) != canonical(masked(first[1], "http", r))
    assert masked(first[0], "http", r) == masked(second[0], "http", r)


def test_a_call_of_one_run_must_not_key_like_another_call_of_the_other() -> None:
    a0, a1 = _http("step 1 at 2026-01-01T00:00:01Z"), _http("step 1 at 2026-01-01T00:00:05Z")
    b0, b1 = _http("step 1 at 2026-01-01T00:00:05Z"), _http("step 1 at 2026-01-01T00:00:09Z")
    rec = Recordings(observed=[_obs(0, a0, b0), _obs(1, a1, b1)])
    calls = [_call(0, a0, "x"), _call(1, a1, "x")]  # same answers: no merge within the run
    cb = [_call(0, b0, "y"), _call(1, b1, "y")]
    rec.paired = [(calls, [(calls[0], cb[0], b0), (calls[1], cb[1], b1)])]
    assert rec.check(Rules([])) is not None  # b0 is a1 already: it would replay a1
    assert "instead of" in (rec.check(Rules([])) or "")


def test_a_merge_is_refused_whichever_call_of_the_group_comes_first() -> None:
    # #0 and #1 are one call asked twice (answered twice); #2, answered like #0, would join
    # them: replayed before #1, it would be handed #1's answer.
    a0 = _http("status at 2026-01-01T00:00:01 of order 1")
    a2 = _http("status at 2026-01-01T00:00:09 of order 1")
    calls = [_call(0, a0, "pending"), _call(1, a0, "shipped"), _call(2, a2, "pending")]
    rec = Recordings(files=[calls])
    assert rec.check(Rules([])) is None
    why = rec.check(Rules([r"re:(?<=at )\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}"]))
    assert why is not None and "#1 openai.chat and #2" in why


USERS = ["6f1c2b9e-7a34-4d2e-9c1a-0b5e8f3d7a21", "0d5e9a47-2c1b-4f8e-a6d3-91e7c2b4f580"]


def _run(label: str, city: str, pick: int, request_id: str) -> list[tuple[Call, Any]]:
    """A model that picks a city and a user (out of one list, the same in both runs), and
    the tool call that follows, with a request id of its own."""
    said = {"status": 200, "headers": [], "json": {
        "content": f"{city}, user {pick} of {USERS}",
        "arguments": json.dumps({"city": city, "user": pick})}}
    tool = {"method": "POST", "path": "/weather", "headers": {},
            "body": {"city": city, "user": USERS[pick], "note": f"request id: {request_id}"}}
    calls = [(_http("plan a trip for one of the users"), said, "openai.chat"),
             (tool, {"status": 200, "headers": [], "json": {"sky": f"sky of {city}"}},
              "weather")]
    return [(Call(CallRef("c.json", i, name), "default", "http", f"{label}{i}", req,
                  answer_of(ans, None)[1]), ans) for i, (req, ans, name) in enumerate(calls)]


def test_what_the_model_chose_differently_in_each_run_is_never_masked() -> None:
    # Masked, `body.city` (or every UUID) would give the weather in Paris and in Rome, for
    # one user and the other, one key in every store.
    a = _run("a", "Paris", 0, "11111111-1111-4111-8111-111111111111")
    b = _run("b", "Rome", 1, "33333333-3333-4333-8333-333333333333")
    observed, pairs, _ = observe(a, b)
    rec = Recordings(observed=observed, paired=[([c for c, _ in a], pairs)],
                     files=[[c for c, _ in a], [c for c, _ in b]])
    p = propose(rec.observed, rec.check)
    assert sorted((d.where, d.kind) for _, d in p.other) == [
        ("body.city", "quoted"), ("body.user", "quoted")]
    (refused,) = p.refused  # the bare UUID rule: it would mask the user too
    assert refused.what == "UUID" and "what the model chose" in refused.reason
    (rule,) = p.texts
    assert rule.startswith("re:(?<=id: )")
    r = Rules(p.texts)
    assert masked(a[1][0].request, "http", r) != masked(b[1][0].request, "http", r)


def test_a_word_both_runs_sent_is_no_difference_whatever_their_answers_said() -> None:
    def run(label: str, said: str) -> list[tuple[Call, Any]]:
        calls = [(_http("is it open?"), {"status": 200, "headers": [], "json": said}),
                 (_http("place it", confirm="yes"), {"status": 200, "headers": [], "json": 1})]
        return [(Call(CallRef("c.json", i, "openai.chat"), "default", "http", f"{label}{i}",
                      req, answer_of(ans, None)[1]), ans) for i, (req, ans) in enumerate(calls)]

    observed, _, _ = observe(run("a", "no"), run("b", "yes"))
    assert [o.diffs for o in observed] == [[], []]
    assert propose(observed, _none).texts == []


def test_whole_fields_become_paths_and_a_field_that_is_sometimes_equal_does_not() -> None:
    observed = [
        _obs(0, _http("q", metadata={"run": "3fa9c2d1e0b41234"}, seed=1, temp=0),
             _http("q", metadata={"run": "77b0e1aa42c9ff00"}, seed=7, temp=0)),
        _obs(1, _http("r", metadata={"run": "aa9c2d1e0b412345"}, seed=2, temp=1),
             _http("r", metadata={"run": "bb0e1aa42c9ff001"}, seed=9, temp=0)),
    ]
    p = propose(observed, _none)
    assert p.texts == ["body.metadata.run", "body.seed"]
    (refused,) = p.refused
    assert refused.what == "field" and "equal in 1 of 2 calls" in refused.reason


def test_credentials_and_ordinary_text_are_never_rules() -> None:
    a = _http("Tell me about Paris", api_key="<secret:aa>")
    b = _http("Tell me about Rome", api_key="<secret:bb>")
    p = propose([_obs(0, a, b)], _none)
    assert p.rules == [] and p.refused == []
    assert sorted(d.kind for _, d in p.other) == ["credential", "text"]


def test_a_nonce_after_a_password_field_name_is_guarded() -> None:
    # A pattern never rewrites a credential, so a rule for it would mask nothing.
    a = _http("key sk-proj-AAAAAAAAAAAAAAAAAAAAAAAA1")
    b = _http("key sk-proj-BBBBBBBBBBBBBBBBBBBBBBBB2")
    p = propose([_obs(0, a, b)], _none)
    assert p.rules == []


def test_a_function_argument_of_a_strong_shape_is_masked_by_its_pattern() -> None:
    a = {"city": "Paris", "at": "2026-01-01T00:00:01.123456"}
    b = {"city": "Paris", "at": "2026-01-01T00:07:01.654321"}
    p = propose([_obs(0, a, b, kind="tool")], _none)
    (rule,) = p.rules
    assert rule.what == "timestamp" and rule.text.startswith("re:")
    c, d = {"city": "Paris", "n": 3}, {"city": "Paris", "n": 8}
    q = propose([_obs(0, c, d, kind="tool")], _none)
    assert q.rules == [] and "ignore=['n']" in q.refused[0].reason


def test_the_same_rule_from_two_contexts_is_kept_once() -> None:
    a = _http('{"started_at": 1796185683073, "finished_at": 1796185684198}')
    b = _http('{"started_at": 1796185742950, "finished_at": 1796185745111}')
    p = propose([_obs(0, a, b)], _none)
    assert p.texts == ['re:(?<=": )1\\d{12}(?!\\d)']
    assert p.differing_after == 0


def test_every_kept_rule_is_a_valid_volatile_item() -> None:
    a = _http("pid 4411 on 127.0.0.1:41234 took 1.5s nonce=3fa9c2d1e0b41234 at /tmp/tmpab12cd34")
    b = _http("pid 5123 on 127.0.0.1:8001 took 12ms nonce=77b0e1aa42c9ff00 at /tmp/tmpzz99yy88")
    p = propose([_obs(0, a, b)], _none)
    assert p.differing_after == 0
    Rules(p.texts)  # parses (and passes the exponential-time check)
    assert {r.what for r in p.rules} == {"number", "port", "duration", "hex nonce", "temp path"}
    assert all(re.compile(t[3:]) for t in p.texts if t.startswith("re:"))


def test_a_long_recording_is_proposed_for_in_linear_time() -> None:
    # The spans a rule explained were taken out of those left by comparing the dataclasses:
    # 10,000 calls took 83 s; now 1.7 s (bound: 20 s).
    import time

    observed = [_obs(i, _http(f"q{i} at 2026-01-01T00:00:{i % 60:02d}"),
                     _http(f"q{i} at 2026-01-01T00:07:{i % 60:02d}")) for i in range(10_000)]
    start = time.perf_counter()
    p = propose(observed, _none)
    assert time.perf_counter() - start < 20
    assert len(p.rules) == 1 and p.differing_after == 0


def test_a_chosen_value_beside_a_clock_is_kept_keyed() -> None:
    # The strings still differ in their times when a rule masks the users' ids: the check
    # looks at the chosen value itself, not at the whole string.
    said = {"status": 200, "headers": [], "json": {"users": USERS}}
    a = [(Call(CallRef("c.json", 0, "chat"), "default", "http", "a0", _http("list"),
               answer_of(said, None)[1]), said),
         (Call(CallRef("c.json", 1, "chat"), "default", "http", "a1",
               _http(f"user {USERS[0]} at 2026-01-01T00:00:01"), b""), None)]
    b = [(Call(CallRef("c.json", 0, "chat"), "default", "http", "b0", _http("list"),
               answer_of(said, None)[1]), said),
         (Call(CallRef("c.json", 1, "chat"), "default", "http", "b1",
               _http(f"user {USERS[1]} at 2026-01-01T00:00:09"), b""), None)]
    observed, _, _ = observe(a, b)
    assert sorted(d.kind for d in observed[1].diffs) == ["quoted", "span"]
    rec = Recordings(observed=observed)
    uuid_rule = "re:" + shape_of("UUID").find.pattern
    assert "what the model chose" in (rec.check(Rules([uuid_rule])) or "")
    assert rec.check(Rules([r"re:(?<=at )\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}"])) is None
