"""Keying by parts (``dejacache._keys_segments``): growing conversations and None vs NaN.

The reference everywhere is the general canonicaliser alone (``keys._general``), which
rewrites every case and remembers nothing: whatever the memos hold, a key must equal it.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import math
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dejacache import _keys_segments as seg
from dejacache import keys
from dejacache.keys import KeyBuilder

_SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow],
                     derandomize=True)
_FILTER = KeyBuilder(None, "f")._filter


def _reference(data: dict[str, Any]) -> bytes:
    return keys._secrets.mask_url_queries(keys._general(data, _FILTER, "f"))


def _quick(data: dict[str, Any]) -> bytes:
    return keys._canonical(data, _FILTER, "f", ())


def _fast(data: dict[str, Any]) -> tuple[bytes, bool]:
    return keys.fast_json(data, names=_FILTER)


def _message(i: int, content: Any = "") -> dict[str, Any]:
    if i % 4 == 1:
        return {"role": "assistant", "content": content if content != "" else None,
                "tool_calls": [{"id": f"call_{i}", "type": "function",
                                "function": {"name": "f", "arguments": "{}"}}]}
    return {"role": ("user", "tool", "assistant", "assistant")[i % 4],
            "content": content if content != "" else f"message {i}"}


def _conversation(n: int, tag: str = "") -> list[dict[str, Any]]:
    return [{"role": "system", "content": f"be brief {tag}"}, *(_message(i) for i in range(n))]


# ------------------------------------------------------------------------------ properties

_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
            | st.floats() | st.text(max_size=6))
_names = st.sampled_from(["role", "content", "name", "traceparent", "password", "x", "trace_id",
                         "metadata"])
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(_names, inner, max_size=3),
    max_leaves=8,
)
_elements = st.dictionaries(_names, _values, max_size=4) | _values


@_SETTINGS
@given(st.lists(_elements, min_size=0, max_size=12), st.lists(_elements, max_size=4),
       _values)
def test_by_parts_writes_what_the_general_path_writes_as_the_list_grows(
    history: list[Any], new: list[Any], other: Any
) -> None:
    data = {"messages": list(history), "other": other}
    assert _quick(data) == _reference(data)
    assert _quick(data) == _reference(data)  # again, with the memos filled
    grown = {"messages": [*history, *new], "other": other}
    assert _quick(grown) == _reference(grown)
    form, full = _fast(grown)
    if full:
        assert form == _reference(grown)


def _nan_for_none(v: Any) -> Any:
    if v is None:
        return math.nan
    if isinstance(v, dict):
        return {k: _nan_for_none(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_nan_for_none(x) for x in v]
    return v


@_SETTINGS
@given(st.lists(_elements, min_size=1, max_size=12), st.integers(0, 11), st.booleans())
def test_a_nan_where_a_seen_element_held_none_never_shares_its_key(
    history: list[Any], at: int, inf: bool
) -> None:
    """orjson writes NaN as null: the bytes of a seen element come back unchanged with a NaN
    where its None was. The memo must notice (probes), not serve the None form."""
    data = {"messages": history}
    before = _quick(data)
    fast_before = _fast(data)[0]
    i = at % len(history)
    swapped = copy.deepcopy(history)
    swapped[i] = _nan_for_none(swapped[i])
    if inf:
        swapped[i] = _nan_for_none(swapped[i])  # NaN stays NaN; inf comes from the next line
        swapped[i] = swapped[i] if swapped[i] == swapped[i] else math.inf
    other = {"messages": swapped}
    assert _quick(other) == _reference(other)
    if _reference(other) != before:  # it held a None there, so the data differs
        assert _quick(other) != before
        form, _ = _fast(other)
        assert form != before and form != fast_before


# ------------------------------------------------------------------------------ conversations


def test_a_growing_conversation_keys_like_the_general_path_every_turn() -> None:
    msgs = _conversation(0)
    for turn in range(30):
        msgs = [*msgs, _message(2 * turn), _message(2 * turn + 1)]
        data = {"model": "m", "messages": msgs, "tools": [{"type": "function", "name": "f"}]}
        assert _quick(data) == _reference(data)
        assert _fast(data)[0] in (_reference(data), _reference(data).rstrip(b" "))


def test_input_mutated_after_keying_keys_afresh() -> None:
    """An old message changed in place after its turn was keyed: same list object, same
    dict objects, new content. Nothing may be trusted by identity."""
    msgs = _conversation(12)
    data = {"messages": msgs}
    first = _quick(data)
    msgs[3]["content"] = "edited"
    assert _quick(data) == _reference(data) != first
    msgs[2]["content"] = math.nan  # was None (an assistant tool call): same bytes as before
    assert _quick(data) == _reference(data)
    assert b'"\\u0000float"' in _reference(data) or b'\x00float' in _reference(data)
    msgs[2]["content"] = None
    msgs.append(_message(13))
    assert _quick(data) == _reference(data)


def test_nan_in_the_history_is_never_answered_with_the_none_entry() -> None:
    kb = KeyBuilder(lambda **kw: kw, "chat")
    none_msgs = _conversation(20, "n")
    nan_msgs = copy.deepcopy(none_msgs)
    nan_msgs[2]["content"] = math.nan
    for _ in range(2):  # second round: both are remembered
        k_none = kb.key("ns", (), {"messages": none_msgs})
        k_nan = kb.key("ns", (), {"messages": nan_msgs})
        assert k_none != k_nan
        f_none = kb.fast_form(kb.bind((), {"messages": none_msgs}))[0]
        f_nan = kb.fast_form(kb.bind((), {"messages": nan_msgs}))[0]
        assert f_none != f_nan


def test_volatile_and_credential_fields_inside_old_messages_are_still_rewritten() -> None:
    msgs = _conversation(10)
    msgs[4] = {**msgs[4], "traceparent": "00-abc-01", "password": "hunter2"}
    data = {"messages": msgs}
    for _ in range(2):
        out = _quick(data)
        assert out == _reference(data)
        assert b"traceparent" not in out and b"hunter2" not in out


def test_elements_of_other_types_fall_back_to_the_general_path() -> None:
    class Sub(dict):  # type: ignore[type-arg]
        pass

    msgs: list[Any] = _conversation(10)
    msgs[3] = Sub(msgs[3])
    msgs[6] = collections.OrderedDict(msgs[6])
    msgs[6] = ("a", 1, None)
    msgs.append(2**70)  # only the general path can write it
    data = {"messages": msgs}
    assert _quick(data) == _reference(data)


def test_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seg, "MEMO_MAX", 4)
    names = keys._Names(_FILTER.vol)
    for n in range(10):
        data = {"messages": _conversation(8, str(n))}
        assert keys._canonical(data, names, "f", ()) == _reference(data)
        assert len(names.lists.runs) <= 4


def test_appending_more_than_the_tail_window_still_keys_correctly() -> None:
    msgs = _conversation(10)
    assert _quick({"messages": msgs}) == _reference({"messages": msgs})
    grown = [*msgs, *(_message(i) for i in range(seg.TAIL + 5))]
    assert _quick({"messages": grown}) == _reference({"messages": grown})


def test_none_check_probes_every_null_of_a_small_request() -> None:
    """Small requests (no long list) remember where their None are, by their bytes."""
    data = {"a": None, "b": [1, None, {"c": None}], "d": "null"}
    first, full = _fast(data)
    again, full2 = _fast(data)
    assert first == again == _reference(data) and full and not full2
    for path in (("a",), ("b", 1), ("b", 2, "c")):
        other = copy.deepcopy(data)
        node: Any = other
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = math.inf
        form, _ = _fast(other)
        assert form == _reference(other) != first


def test_null_inside_text_only_needs_no_mark() -> None:
    data = {"q": "is it null?"}
    assert _fast(data)[0] == _fast(data)[0] == _reference(data)
    assert not _reference(data).endswith(keys._NONE_MARK)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.integers() | st.text(max_size=3),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=3), c,
                                                                         max_size=4),
                    max_leaves=20),
       st.sampled_from([math.nan, math.inf, -math.inf]))
def test_compiled_none_probe_agrees_with_the_walk(data: Any, bad: float) -> None:
    """``NoneCheck.ok`` runs its probes as one generated function: it must
    pass the data it was built from and refuse the same data with any ``None`` turned into
    NaN or an infinity (the same bytes to orjson), and a container swapped for a subclass."""
    data = {"request": data}
    paths = seg.none_paths(data, frozenset({int, bool}))
    assert paths is not None
    check = seg.NoneCheck(paths)
    assert check.ok(data) and check.ok(data)  # the second call runs the compiled probe
    for path in paths:
        if not path:
            continue
        twin = copy.deepcopy(data)
        node = twin
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = bad
        assert not check.ok(twin)
        if type(node) is dict:  # a subclass may answer lookups its own way: refused
            twin = copy.deepcopy(data)
            parent: Any = None
            node = twin
            for step in path[:-1]:
                parent, node = node, node[step]
            if parent is not None:
                parent[path[-2]] = type("D", (dict,), {})(node)
                assert not check.ok(twin)


# ------------------------------------------------------------------ lists cut out of the whole

_SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"  # secret-shaped: the store masks it
_texts = st.text(max_size=6) | st.sampled_from(["", "?", "https://x.io/?a=1", _SECRET,
                                                "eyJ", "task-list"])
_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | _texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=6,
)
_message_like = st.dictionaries(st.sampled_from(["role", "content", "name", "x"]), _plain,
                                min_size=1, max_size=3)


def _whole(data: dict[str, Any]) -> bytes:
    return keys._dump(data)


def _slow_scrub(form: bytes) -> bytes:
    copy = bytes(memoryview(form))  # a new object (bytes(form) is form): never vouched
    assert copy is not form
    return keys._secrets.scrub_request(copy)


@_SETTINGS
@given(st.lists(_message_like, min_size=1, max_size=10), st.lists(_message_like, max_size=9),
       st.lists(_message_like, max_size=3), _plain, st.lists(_message_like, max_size=3))
def test_lists_cut_out_of_the_whole_key_like_the_general_path(
    history: list[Any], tools: list[Any], new: list[Any], other: Any, nested: list[Any]
) -> None:
    """Several lists at several levels, cut out of one write of the whole: the same bytes as
    the general path, each span where its list's bytes are, and the scrubbing check sound
    (a form it passes is one scrubbing leaves as it is) on the first sight and on a turn."""
    for msgs in (history, [*history, *new]):
        data: dict[str, Any] = {"messages": list(msgs), "tools": tools, "other": other,
                                "sub": {"items": nested, "m": "x"}}
        whole = _whole(data)
        out, _check, cut = keys._by_parts(data, _FILTER, True, whole)
        if out is None:  # not plain under these names (a password, a traceparent)
            continue
        assert cut is not None
        spans, url, marked = cut
        assert out is whole  # the mark, when it needs one, is the caller's to add
        assert keys._finish(out + keys._NONE_MARK if marked else out, ()) == _reference(data)
        assert url or b"://" not in out  # "no URL" is only ever said of a form without one
        for off, run in spans:
            assert out[off] == ord("[") and out[off + run.length] == ord("]")
        found = {out[off:off + run.length + 1] for off, run in spans}
        wanted = {_whole({"v": v})[5:-1] for v in (data["messages"], tools, nested)
                  if seg._by_parts(v)}
        assert found == wanted
        if seg.scrub_free(out, spans, keys._secrets.scrub_invariant):
            assert _slow_scrub(out) == out.rstrip(b" ")


def _long_conversation(n: int, tag: str) -> list[dict[str, Any]]:
    """Over ``keys._BY_PARTS_MIN`` bytes, so a first sight writes it by parts."""
    pad = "word " * 40
    return [{"role": "system", "content": f"be brief {tag}"},
            *({**_message(i), "content": None} if i % 4 == 1 else
              {**_message(i), "content": f"{pad}{tag}{i}"} for i in range(n))]


def _miss_key(kb: KeyBuilder, request: dict[str, Any], seed: int) -> str:
    """The key ``@cache`` computes for ``llm(request)`` on a miss."""
    found = kb.probe_key((request,), {}, seed)
    if type(found) is str:
        return found
    return kb.bind_key((request,), {}, seed, (), found)[1]


def _reference_key(kb: KeyBuilder, request: dict[str, Any], seed: int) -> str:
    return keys._hex(keys._secrets.mask_url_queries(
        keys._general({"request": request}, kb._filter, "f")), seed=seed)


@pytest.mark.parametrize("mutate", ["content", "nested", "none_to_nan", "nan_to_none",
                                    "appended_key", "list_item", "type"])
def test_a_message_mutated_in_place_between_turns_changes_the_key(mutate: str) -> None:
    """Turn after turn the history is the same dict objects; one of them changed in place
    (at the top or deep inside) must never key like before, and must key like the general
    path (nothing is trusted by identity)."""
    def llm(request: dict[str, Any]) -> None: ...

    kb = KeyBuilder(llm, f"mutate.{mutate}")
    seed = keys.key_seed("ns", kb.name)
    msgs = _long_conversation(160, mutate)
    if mutate == "nan_to_none":
        msgs[6]["content"] = math.nan
    before: list[str] = []
    for turn in range(3):
        msgs += [_message(2 * turn), _message(2 * turn + 1)]
        request = {"model": "m", "messages": msgs}
        key = _miss_key(kb, request, seed)
        assert key == _reference_key(kb, request, seed)
        before.append(key)
    old = msgs[9]
    if mutate == "content":
        old["content"] += "!"
    elif mutate == "nested":
        msgs[6]["tool_calls"][0]["function"]["arguments"] = '{"x": 1}'
    elif mutate == "none_to_nan":
        msgs[6]["content"] = math.nan  # orjson writes both as null: the same bytes
    elif mutate == "nan_to_none":
        msgs[6]["content"] = None
    elif mutate == "appended_key":
        old["name"] = "someone"
    elif mutate == "list_item":
        msgs[6]["tool_calls"].append({"id": "c", "type": "function"})
    else:
        old["content"] = 7
    request = {"model": "m", "messages": msgs}
    key = _miss_key(kb, request, seed)
    assert key == _reference_key(kb, request, seed)
    assert key not in before
    assert _miss_key(kb, request, seed) == key  # and again, now that it is remembered


def test_decorated_miss_after_an_in_place_edit_runs_the_function_again() -> None:
    import dejacache

    store = dejacache.MemoryStore()
    calls: list[int] = []

    @dejacache.cache
    def llm(request: dict[str, Any]) -> int:
        calls.append(1)
        return len(calls)

    with dejacache.scope(store=store, cache_key="edit"):
        msgs = _long_conversation(160, "edit")
        request = {"model": "m", "messages": msgs}
        assert llm(request) == 1
        assert llm(request) == 1  # a hit
        msgs[6]["tool_calls"][0]["function"]["name"] = "g"  # deep, in place
        assert llm(request) == 2
        msgs[6]["content"] = math.nan  # was None: same bytes
        assert llm(request) == 3
        msgs[6]["content"] = None
        assert llm(request) == 2 or calls == [1, 1, 1, 1]  # the first edit's entry again


def test_the_stored_request_is_scrubbed_when_a_turn_brings_a_secret() -> None:
    """The newest message of a turn holds an API key; the history was vouched clean by
    earlier turns. The store must get the key masked all the same, and the vouched path
    must write what the full scrub writes."""
    import dejacache

    store = dejacache.MemoryStore()

    @dejacache.cache
    def llm(request: dict[str, Any]) -> str:
        return "ok"

    with dejacache.scope(store=store, cache_key="scrub"):
        msgs = _long_conversation(160, "scrub")
        for turn in range(3):
            msgs += [_message(2 * turn), _message(2 * turn + 1)]
            llm({"model": "m", "messages": msgs})
        msgs.append({"role": "user", "content": f"my key is {_SECRET} ok?"})
        llm({"model": "m", "messages": msgs})
        msgs.append({"role": "user", "content": "and https://x.io/a?api_key=abc"})
        llm({"model": "m", "messages": msgs})
    requests = [r.request for _, r in store.iterate()]
    assert len(requests) == 5
    for req in requests:
        assert _SECRET.encode() not in req and b"api_key=abc" not in req
        assert req == _slow_scrub(req)  # what the full scrub keeps is a fixed point
        assert not req.endswith(b" ")
    assert sum(b"my key is <secret:" in r for r in requests) == 2


def test_vouched_scrub_writes_what_the_full_scrub_writes() -> None:
    def llm(request: dict[str, Any]) -> None: ...

    kb = KeyBuilder(llm, "vouch")
    for secret in (False, True):
        msgs = _long_conversation(160, f"vouch{secret}")
        if secret:
            msgs[7]["content"] = f"old secret {_SECRET}"
        for turn in range(3):
            msgs += [_message(2 * turn), _message(2 * turn + 1)]
            request = {"model": "m", "messages": msgs}
            _b, key, body, tail, full = kb.bind_key((request,), {}, 1)
            assert full and tail == keys._NONE_MARK  # the mark is never written onto body
            assert key == keys._hex(body + tail, seed=1)
            vouched = keys._secrets._VOUCHED.get(id(body))
            assert vouched is not None and vouched[0] is body
            assert vouched[1]() is not secret  # the clean one takes the short way
            expected = _slow_scrub(body)
            assert keys._secrets.scrub_request(body) == expected
            assert (_SECRET.encode() in expected) is False


def _reordered(v: Any, tuples: bool = True) -> Any:
    """The same data built another way: dict keys in reverse order, fresh objects
    throughout, and (``tuples``) tuples for lists."""
    if type(v) is dict:
        return {k: _reordered(v[k], tuples) for k in reversed(list(v))}
    if type(v) is list:
        items = [_reordered(x, tuples) for x in v]
        return tuple(items) if tuples else items
    return v


_BASE = _long_conversation(120, "prop")


@_SETTINGS
@given(st.lists(_message_like, min_size=1, max_size=4), st.integers(0, 119), _plain)
def test_long_requests_key_by_value_not_by_how_they_were_built(
    new: list[Any], at: int, leaf: Any
) -> None:
    """Over the by-parts threshold, keyed turn after turn: equal requests built differently
    share a key; a request with one message different never shares one."""
    def llm(request: dict[str, Any]) -> None: ...

    kb = KeyBuilder(llm, "prop")
    seed = keys.key_seed("ns", "prop")
    history = copy.deepcopy(_BASE)
    _miss_key(kb, {"model": "m", "messages": history}, seed)  # the previous turn, remembered
    request = {"model": "m", "messages": [*history, *new]}
    key = _miss_key(kb, request, seed)
    assert key == _reference_key(kb, request, seed)
    assert key == _miss_key(kb, _reordered(request, tuples=False), seed)  # by parts
    assert key == _miss_key(kb, _reordered(request), seed)  # a tuple: the whole at once
    changed = copy.deepcopy(request)
    changed["messages"][at + 1]["x"] = leaf  # no message had "x": always a new field
    other = _miss_key(kb, changed, seed)
    assert other == _reference_key(kb, changed, seed)
    assert other != key


def test_many_lists_and_a_long_string_beside_them_key_like_the_general_path() -> None:
    """More lists than placeholders, and a skeleton larger than the lists: the cut falls
    back or compares in place, never guesses."""
    def llm(request: dict[str, Any]) -> None: ...

    kb = KeyBuilder(llm, "many")
    seed = keys.key_seed("ns", "many")
    request: dict[str, Any] = {f"l{i:02d}": [{"i": i, "v": None}] for i in range(40)}
    request["messages"] = _long_conversation(60, "many")
    request["system"] = "long " * 5000
    for _ in range(2):
        assert _miss_key(kb, request, seed) == _reference_key(kb, request, seed)
    few = {"messages": request["messages"], "system": request["system"], "b": [{"x": 1}]}
    for _ in range(2):
        assert _miss_key(kb, few, seed) == _reference_key(kb, few, seed)
    assert all(type(h) is bytes for h in kb._filter.lists.heads)  # no view keeps a request


@pytest.mark.parametrize("where", ["history", "new", "skeleton"])
def test_credentials_in_urls_are_masked_in_the_key_wherever_they_come_from(where: str) -> None:
    """URL masking is skipped only for forms known to hold no ``://``: a credential query
    in an old message, a new one or beside the messages is masked on every turn."""
    def llm(request: dict[str, Any]) -> None: ...

    kb = KeyBuilder(llm, f"url.{where}")
    seed = keys.key_seed("ns", kb.name)
    url = "see https://api.example.com/v1?api_key=sk-live-123&q=1 ok?"
    msgs = _long_conversation(120, f"url{where}")
    if where == "history":
        msgs[3]["content"] = url
    for turn in range(3):
        msgs += [_message(2 * turn), _message(2 * turn + 1)]
        if where == "new" and turn == 2:
            msgs.append({"role": "user", "content": url})
        request: dict[str, Any] = {"model": "m", "messages": msgs}
        if where == "skeleton":
            request["base_url"] = url
        key = _miss_key(kb, request, seed)
        assert key == _reference_key(kb, request, seed)
    _b, _k, body, _t, _f = kb.bind_key((request,), {}, seed)
    assert b"sk-live-123" not in body and b"api_key=<secret:" in body


def test_harmless_urls_in_the_history_are_asked_of_once(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """A conversation whose history holds URLs (no credential in them): each turn asks URL
    masking and the store's scrubbing only about its new messages, never the whole request
    again (every turn masked and scrubbed 200 KB: 17 ms a miss, 95x its floor, at 1,000
    messages)."""
    import dejacache

    asked: list[int] = []
    for name, mod in (("_urls_unmasked", keys), ("scrub_invariant", keys._secrets)):
        orig = getattr(mod, name)

        def spy(data: bytes, _orig: Any = orig) -> bool:
            asked.append(len(data))
            return bool(_orig(data))

        monkeypatch.setattr(mod, name, spy)
    store = dejacache.MemoryStore()

    @dejacache.cache
    def llm(request: dict[str, Any]) -> str:
        return "ok"

    msgs = _long_conversation(400, "urls")
    for i in range(0, 400, 3):
        msgs[i]["content"] = f"see https://docs.example.com/p/{i}?page=2 for {i}"
    with dejacache.scope(store=store, cache_key="urls"):
        llm({"model": "m", "messages": msgs})
        whole = len(orjson.dumps(msgs))
        for turn in range(3):
            asked.clear()
            msgs += [{"role": "user", "content": f"and https://x.example/{turn}?a=b"},
                     _message(2 * turn)]
            llm({"model": "m", "messages": msgs})
            assert asked and max(asked) < whole // 20, asked  # the new messages, not all
    requests = [r.request for _, r in store.iterate()]
    assert len(requests) == 4 and all(r == _slow_scrub(r) for r in requests)


@_SETTINGS
@given(st.lists(_elements, min_size=0, max_size=40), st.lists(_elements, max_size=4),
       st.booleans())
def test_the_full_key_a_miss_stores_under_is_the_general_paths_key(
        history: list[Any], new: list[Any], seen: bool) -> None:
    """``KeyBuilder.full_key`` (what a miss stores under once its fast key missed, written
    by parts out of the fast form's bytes) is the key of the canonical form the general path
    writes: whatever the data holds (None, NaN, credentials, volatile names, tuples) and
    whether its bytes were seen before (``seen``: a probe or an earlier turn wrote them)."""
    def llm(request: dict[str, Any]) -> None: ...

    kb = KeyBuilder(llm, "full")
    seed = keys.key_seed("ns", "full")
    request = {"model": "m", "messages": [*history, *new]}
    if seen:
        _miss_key(kb, {"model": "m", "messages": history}, seed)
        _miss_key(kb, request, seed)
    bound = {"request": request}
    expected = keys.digest("ns", "full", kb.canonical_bound(bound))
    out = keys._dump(bound) if kb._filter.plain.issuperset(bound) else None
    with contextlib.suppress(TypeError, orjson.JSONEncodeError):
        assert kb.full_key(bound, seed, (), out)[0] == expected
    assert kb.full_key(bound, seed)[0] == expected


@_SETTINGS
@given(st.lists(_elements, min_size=0, max_size=12), _values)
def test_written_whole_the_form_is_the_one_by_parts(history: list[Any], other: Any) -> None:
    """``canonical_json(by_parts=False)`` (small HTTP bodies: ``exchange._PARTS_FROM``)
    writes the bytes the parts and the general path write."""
    data = {"messages": list(history), "other": other}
    whole = keys._canonical(data, _FILTER, "f", (), by_parts=False)
    assert whole == _reference(data) == _quick(data)


def test_compiled_none_probe_walks_a_shared_prefix_once_and_checks_every_leaf() -> None:
    """Paths under one ``request.messages`` share its steps in the generated probe: every
    ``None`` is still probed, and a missing key or a short list answers False, not an
    error."""
    data = {"request": {"messages": [{"content": None}, {"content": "x"},
                                     {"content": None, "name": None}], "stop": None}}
    paths = seg.none_paths(data, frozenset())
    assert paths is not None and len(paths) == 4
    check = seg.NoneCheck(paths)
    assert check.ok(data) and check.ok(data)  # the second call runs the compiled probe
    for path in paths:
        twin = copy.deepcopy(data)
        node: Any = twin
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = float("nan")
        assert not check.ok(twin), path
        del node[path[-1]]
        assert not check.ok(twin), path
    short = copy.deepcopy(data)
    short["request"]["messages"].pop()
    assert not check.ok(short)
    assert not check.ok({"request": (data["request"],)})
