"""Volatile items: names, dotted/wildcard paths and patterns inside text (pure functions)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dejacache import ConfigurationError
from dejacache._core import volatile_watch
from dejacache._core.volatile import (
    PLACEHOLDER,
    check,
    declared_paths,
    parse,
    parse_path,
    under,
)
from dejacache._core.volatile_apply import apply
from dejacache._core.volatile_watch import never_matched, unwatch, watch


def test_parse_splits_names_paths_and_patterns() -> None:
    pat = re.compile(r"\d\d:\d\d")
    spec = parse(["trace_id", "body.messages[*].content", pat, "re:id-[0-9a-f]+"])
    assert spec.names == {"trace_id"}
    assert spec.paths == (("body", "messages", None, "content"),)
    assert spec.patterns[0] is pat and spec.patterns[1].pattern == "id-[0-9a-f]+"


@pytest.mark.parametrize("item", ["!api_key", "!Authorization", "!x-api-key", "!apiKey",
                                  "!cookie", "!OpenAI-Organization", "!db_password"])
def test_keeping_a_credential_is_refused_naming_the_item(item: str) -> None:
    """A credential keys only as a keyed mask or an identity digest: ``!name`` cannot key it
    as it is, and was a silent no-op."""
    with pytest.raises(ConfigurationError, match=re.escape(repr(item))):
        parse([item])


@pytest.mark.parametrize(("name", "kept"), [("x", "!x"), ("trace_id", "!traceId"),
                                            ("user-agent", "!User_Agent"), ("RunId", "!run_id")])
def test_one_list_that_drops_and_keeps_a_name_is_refused(name: str, kept: str) -> None:
    for items in ([name, kept], [kept, "other", name]):
        with pytest.raises(ConfigurationError, match=re.escape(repr(name))) as err:
            check(items)
        assert repr(kept) in str(err.value)
    # Lists joined outer to inner (configure's, a scope's, a block's) are read by parse:
    # an inner ``!x`` keeps what an outer ``x`` dropped.
    assert parse([name, kept]).keep == {kept[1:]}
    assert check([name]) == parse([name]) and check([kept, "y"]) == parse([kept, "y"])


def test_a_parse_compares_by_its_fields_and_is_false_when_empty() -> None:
    assert parse(["a", "!b", "c.d"]) == parse(["c.d", "!b", "a"])
    assert hash(parse(["a"])) == hash(parse(["a"])) and parse(["a"]) != parse(["b"])
    assert not parse([]) and not parse(None) and parse(["!b"])
    assert repr(parse(["a"])) == (
        "Volatility(names=frozenset({'a'}), paths=(), patterns=(), keep=frozenset())")


@pytest.mark.parametrize("bad", ["a..b", "a[", "a[x]", ".a", "a.", "re:(", 3, ""])
def test_malformed_items_are_errors_naming_the_item(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        parse([bad])


def test_a_pattern_matching_the_empty_string_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="empty string"):
        parse([re.compile(r"\d*")])


def test_paths_drop_keys_and_keep_list_positions() -> None:
    data = {"messages": [{"role": "user", "content": "a", "id": 1},
                         {"role": "assistant", "content": "b", "id": 2}], "n": 1}
    out = apply(data, (parse_path("messages[*].id"), parse_path("messages[1].content")), ())
    assert out == {"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}],
                   "n": 1}
    assert data["messages"][0]["id"] == 1  # never mutated
    assert apply([1, 2, 3], (parse_path("[1]"),), ()) == [1, PLACEHOLDER, 3]
    # Lists met on the way are walked even without [*].
    assert apply({"m": [{"x": 1}, {"x": 2}]}, (parse_path("m.x"),), ()) == {"m": [{}, {}]}


def test_patterns_replace_matches_inside_every_string() -> None:
    judge = ("Evaluate.\n<opentelemetry_traces>\nspan 3f2a at 12:04:31.123 took 0.41s\n"
             "</opentelemetry_traces>\nVerdict?")
    pat = re.compile(r"(?s)<opentelemetry_traces>.*</opentelemetry_traces>")
    out = apply({"messages": [{"content": judge}], "model": "m"}, (), (pat,))
    assert out["messages"][0]["content"] == f"Evaluate.\n{PLACEHOLDER}\nVerdict?"
    assert out["model"] == "m"


def test_untouched_data_is_returned_as_is() -> None:
    data = {"a": [{"b": "text"}]}
    assert apply(data, (parse_path("a.c"),), (re.compile("zzz"),)) is data


def test_http_paths_default_to_the_body() -> None:
    roots = frozenset({"method", "path", "query", "body"})
    assert under((("messages", None, "content"), ("query", "t")), roots, "body") == (
        ("body", "messages", None, "content"), ("query", "t"))


_text = st.text(alphabet="ab:0123456789 ", max_size=20)
_json = st.recursive(st.none() | st.integers() | _text,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
                     max_leaves=10)


@given(_json)
def test_values_differing_only_in_matches_agree_after_apply(base: Any) -> None:
    pat = re.compile(r"\d\d:\d\d")

    def stamp(v: Any, t: str) -> Any:
        if isinstance(v, str):
            return f"{v} at {t}"
        if isinstance(v, list):
            return [stamp(x, t) for x in v]
        if isinstance(v, dict):
            return {k: stamp(x, t) for k, x in v.items()}
        return v

    assert apply(stamp(base, "12:04"), (), (pat,)) == apply(stamp(base, "23:59"), (), (pat,))


# ---------------------------------------------------------------- paths that never match


def keyed(*calls: dict[str, Any], paths: list[str]) -> list[str]:
    """Key ``calls`` (top-level mappings, as a function's bound arguments or a request's
    parts) under a watch for ``paths``; what it reports as never matched."""
    declared = declared_paths(paths)
    applied = tuple(dict.fromkeys(f for forms in declared.values() for f in forms))
    owner = object()
    watch(owner)
    for call in calls:
        apply(call, applied, ())
    return [text for text, _root in never_matched(unwatch(owner), declared)]


REQUEST = {"method": "POST", "path": "/v1/chat/completions",
           "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}


def test_a_path_that_never_matched_is_reported_by_its_text() -> None:
    assert keyed(REQUEST, paths=["body.nonexistent_root.x"]) == ["body.nonexistent_root.x"]
    # relative to the body, as HTTP requests read it
    assert keyed(REQUEST, paths=["nonexistent_root.x"]) == ["nonexistent_root.x"]
    # a first name no request part or parameter has: read under the body, never matched
    assert keyed(REQUEST, paths=["cookies.x-request-id"]) == ["cookies.x-request-id"]
    # request headers are a part of their own: tried only on requests that have headers
    assert keyed(REQUEST, paths=["headers.x-request-id"]) == []
    assert keyed({**REQUEST, "headers": {"accept": "*/*"}},
                 paths=["headers.x-request-id"]) == ["headers.x-request-id"]


def test_a_path_that_matched_once_is_not_reported() -> None:
    plain = {"method": "GET", "path": "/v1/models"}
    assert keyed(REQUEST, plain, paths=["body.messages[*].content", "messages[0].role",
                                       "body.model"]) == []
    other = {"method": "POST", "path": "/v1/x", "body": {"input": "x"}}
    assert keyed(other, other, REQUEST, paths=["body.model"]) == []


def test_nothing_tried_nothing_reported() -> None:
    assert keyed(paths=["body.nonexistent_root.x"]) == []  # no call at all
    # a function whose parameters do not include the first name: never tried
    assert keyed({"question": "x"}, paths=["request.metadata.run"]) == []
    # a request without a body (GET) never tries a body path
    assert keyed({"method": "GET", "path": "/v1/models"}, paths=["body.model.x"]) == []


def test_function_parameters_are_first_names_too() -> None:
    assert keyed({"request": {"metadata": {"run": 1}}}, paths=["request.metadata.run"]) == []
    assert keyed({"request": {"metadata": {}}}, paths=["request.metadata.run"]) == [
        "request.metadata.run"]


def test_a_match_inside_a_nested_watch_counts_for_the_outer_one() -> None:
    outer_paths = declared_paths(["body.model"])
    inner_paths = declared_paths(["body.nonexistent_root.x"])
    outer, inner = object(), object()
    watch(outer)
    watch(inner)
    apply(REQUEST, (("body", "model"), ("body", "nonexistent_root", "x")), ())
    assert [t for t, _ in never_matched(unwatch(inner), inner_paths)] == [
        "body.nonexistent_root.x"]
    assert never_matched(unwatch(outer), outer_paths) == []


def test_unwatch_from_another_context_reports_nothing() -> None:
    assert unwatch(object()) is None
    assert never_matched(None, declared_paths(["body.x"])) == []


def test_a_watch_past_its_bound_reports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths declared without end (new ones per block) cannot grow a watch without bound; a
    watch that had to stop noting says nothing rather than guess."""
    monkeypatch.setattr(volatile_watch, "MAX_NOTED", 3)
    owner = object()
    watch(owner)
    many = [("body", f"field{i}") for i in range(10)]
    apply(REQUEST, tuple(many), ())
    w = unwatch(owner)
    assert w is not None and len(w.tried) == 3 and w.full
    assert never_matched(w, declared_paths(["body.field0"])) == []


def test_declared_paths_keep_paths_only() -> None:
    declared = declared_paths(["trace_id", re.compile("x+"), "re:y+", "messages[0].content",
                               "body.model"])
    assert declared == {
        "messages[0].content": (("messages", 0, "content"), ("body", "messages", 0, "content")),
        "body.model": (("body", "model"),),
    }


# ------------------------------------------------------------------ credentials come first

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def test_patterns_never_rewrite_a_credential() -> None:
    data = {"password": "pw-2024-01-01", "auth": {"db_pwd": ["x-2024-01-01", 7]},
            "schema": {"password": {"type": "string", "description": "since 2024-01-01",
                                    "default": "pw-2024-01-01"}},
            "creds": {"password": {"description": "pw-2024-01-01"}},
            "note": "seen 2024-01-01"}
    out = apply(data, (), (_DATE,))
    assert out["password"] == "pw-2024-01-01"
    assert out["auth"] == {"db_pwd": ["x-2024-01-01", 7]}
    # a JSON schema's ``password`` property is a dict the key walks, not a credential; the
    # values it gives are the credential's, and a dict that is no schema is the credential
    assert out["schema"]["password"]["description"] == f"since {PLACEHOLDER}"
    assert out["schema"]["password"]["default"] == "pw-2024-01-01"
    assert out["creds"] == data["creds"]
    assert out["note"] == f"seen {PLACEHOLDER}"


def test_patterns_never_rewrite_a_credential_pair() -> None:
    """A ``[name, value]`` pair is keyed as a field of that name is: two passwords that
    differ only in a date are two keys (one key served one login's session to the other)."""
    from dejacache import keys

    def key(data: object) -> bytes:
        return keys.canonical_json({"v": data}, volatile_patterns=(_DATE,))

    assert key([["Authorization", "pw-2024-01-01"], ["Accept", "x"]]) != key(
        [["Authorization", "pw-1999-12-31"], ["Accept", "x"]])
    # a schema's ``enum`` list of two is no pair: the pattern still applies there
    assert key({"enum": ["token", "2024-01-01"]}) == key({"enum": ["token", "1999-12-31"]})
    out = apply({"h": [["password", "pw-2024-01-01"]], "l": ["x", "at 2024-01-01"]}, (),
                (_DATE,))
    assert out == {"h": [["password", "pw-2024-01-01"]], "l": ["x", f"at {PLACEHOLDER}"]}


def test_patterns_never_rewrite_a_basic_auth_password() -> None:
    """Basic credentials under an ``auth``-like name, as a field or a pair, are left to the
    key's mask: passwords differing only in a date are two keys. Other values under those
    names are data the patterns apply to."""
    from dejacache import keys

    def key(data: object) -> bytes:
        return keys.canonical_json({"v": data}, volatile_patterns=(_DATE,))

    for holder in (lambda pw: {"auth": ["alice", pw]}, lambda pw: {"proxy_auth": "alice:" + pw},
                   lambda pw: [["auth", ("alice", pw)]], lambda pw: [["httpAuth", "alice:" + pw]]):
        assert key(holder("pw-2024-01-01")) != key(holder("pw-1999-12-31"))
    out = apply({"auth": "since 2024-01-01", "h": [["auth", "at 2024-01-01"]]}, (), (_DATE,))
    assert out == {"auth": f"since {PLACEHOLDER}", "h": [["auth", f"at {PLACEHOLDER}"]]}


def test_secret_shapes_and_masks_in_text_are_kept_whole() -> None:
    from dejacache import _secrets

    key = "sk-proj-AbCd2024-01-01EfGhIjKlMnOpQrSt"
    mask = _secrets.mask("x")
    out = apply({"t": f"{key} on 2024-05-06 and {mask}"}, (), (re.compile(r"\d{4}-\d{2}-\d{2}"),
                                                                re.compile(r"[0-9a-f]{6,}")))
    assert out["t"] == f"{key} on {PLACEHOLDER} and {mask}"


def test_url_credentials_are_masked_before_any_pattern() -> None:
    from dejacache import _secrets

    host = re.compile(r"https?://[^/]+")
    out = apply({"u": "https://127.0.0.1:5001/x?password=pw-2024-01-01&day=2024-01-01"}, (),
                (host, _DATE))
    assert out["u"] == (f"{PLACEHOLDER}/x?password={_secrets.mask('pw-2024-01-01')}"
                        f"&day={PLACEHOLDER}")


def test_a_literal_placeholder_is_escaped() -> None:
    texts = ["a <volatile> b", "a <volatile\\> b", "a 2024-01-01 b", "a <volatile\\\\> b"]
    outs = [apply(t, (), (_DATE,)) for t in texts]
    assert outs == ["a <volatile\\> b", "a <volatile\\\\> b", f"a {PLACEHOLDER} b",
                    "a <volatile\\\\\\> b"]
    assert len(set(outs)) == 4
    assert apply("a <volatile> b", (), ()) == "a <volatile> b"  # no pattern: nothing to tell


def test_patterns_run_before_paths_so_path_placeholders_stay_placeholders() -> None:
    out = apply({"items": ["2024-01-01", "x"]}, (parse_path("items[1]"),), (_DATE,))
    assert out == {"items": [PLACEHOLDER, PLACEHOLDER]}


@pytest.mark.parametrize("bad", [r"(a+)+$", r"(\w+\s?)+$", r"(a|a)*b"])
def test_a_pattern_that_can_take_exponential_time_is_refused(bad: str) -> None:
    """``re:(a+)+$`` took 7 s on a 25-character argument; it is refused when parsed, naming
    the pattern and a way out."""
    for item in (f"re:{bad}", re.compile(bad)):
        with pytest.raises(ConfigurationError, match="exponential time") as info:
            parse([item])
        assert repr(bad) in str(info.value) and "possessive" in str(info.value)


def test_possessive_and_atomic_rewrites_are_accepted_and_fast() -> None:
    import time

    spec = parse(["re:(a++)+$", "re:(?>a+)+$"])
    start = time.perf_counter()
    apply({"s": "a" * 25 + "!"}, (), spec.patterns)
    assert time.perf_counter() - start < 1.0  # microseconds; the refused form took 7 s


# ------------------------------------------------------------------ where telemetry lives


def test_telemetry_ids_are_telemetry_under_a_holder_or_in_a_message_in_a_list() -> None:
    from dejacache._core.volatile import telemetry_at, telemetry_below, telemetry_item

    def below(place: int, key: str) -> int:
        by_key, other = telemetry_below(place)
        return by_key.get(key, other)

    top = 0
    assert not telemetry_at(top, {"trace_id": "t"})  # a parameter, a body's own field
    assert not telemetry_at(below(top, "query"), {"trace_id": "t"})
    assert not telemetry_at(below(top, "arguments"), {"trace_id": "t"})
    for holder in ("metadata", "_meta", "headers"):
        held = below(top, holder)
        assert telemetry_at(held, {"trace_id": "t"})
        assert telemetry_at(below(held, "langwatch"), {})  # any depth below
        assert telemetry_at(telemetry_item(held), {})  # lists under a holder too
    for name in ("messages", "new_messages"):  # a message, with its role or without
        assert telemetry_at(telemetry_item(below(top, name)), {"trace_id": "t"})
    item = telemetry_item(below(top, "history"))
    assert telemetry_at(item, {"role": "user", "trace_id": "t"})
    assert not telemetry_at(item, {"id": 1, "trace_id": "t"})  # a record, not a message
    assert not telemetry_at(below(item, "content"), {"role": "x"})  # not below it
