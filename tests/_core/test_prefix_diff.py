"""The pure prefix model: normalisation, segment order, first difference and its reason."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dejacache._core.prefix import api_of, build_prefix, compare, first_difference, window

SYSTEM = "You are terse. " * 20


def anthropic(system: Any = SYSTEM, messages: Any = None, tools: Any = None,
              model: str = "claude-sonnet-4-6", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "system": system,
                            "messages": messages or [{"role": "user", "content": "hi"}]}
    if tools is not None:
        body["tools"] = tools
    return {**body, **extra}


def diff(a: dict[str, Any], b: dict[str, Any], api: str = "messages") -> Any:
    return compare(build_prefix(api, a), build_prefix(api, b))


def test_segments_in_provider_order() -> None:
    p = build_prefix("messages", anthropic(tools=[{"name": "t", "description": "d"}]))
    assert [i.path for i in p.items] == ["tools[0]", "system[0]", "messages[0]"]
    chat = build_prefix("chat", {"model": "m", "tools": [{"type": "function"}],
                                 "messages": [{"role": "system", "content": "s"},
                                              {"role": "user", "content": "u"}]})
    assert [(i.path, i.system_like) for i in chat.items] == [
        ("tools[0]", False), ("messages[0]", True), ("messages[1]", False)]
    resp = build_prefix("responses", {"model": "m", "instructions": "i", "input": "hello"})
    assert [i.path for i in resp.items] == ["instructions", "input[0]"]
    assert len(set(p.chain)) == len(p.chain)


def test_api_of() -> None:
    assert api_of("anthropic", {}) == "messages"
    assert api_of("openai", {"messages": []}) == "chat"
    assert api_of("openai", {"input": "x"}) == "responses"
    assert api_of("openai", {"prompt": "x"}) is None
    assert api_of("openai", {}, "openai.chat.completions") == "chat"
    assert api_of("openai", {}, "openai.embeddings") is None


def test_growing_conversation_and_repeats_are_not_breaks() -> None:
    one = anthropic(messages=[{"role": "user", "content": "a"}])
    two = anthropic(messages=[{"role": "user", "content": "a"},
                              {"role": "assistant", "content": "b"},
                              {"role": "user", "content": "c"}])
    assert diff(one, two) is None
    assert diff(two, two) is None


def test_string_content_equals_one_text_block_and_markers_move_freely() -> None:
    marked = anthropic(
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}])
    plain = anthropic(system=SYSTEM, messages=[{"role": "user", "content": "hi"}])
    assert diff(marked, plain) is None
    assert build_prefix("messages", marked).breakpoints() != []
    assert build_prefix("messages", plain).breakpoints() == []


def test_tool_result_content_is_normalised_too() -> None:
    def body(content: Any) -> dict[str, Any]:
        return anthropic(messages=[{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": content}]}])

    marked = [{"type": "text", "text": "42", "cache_control": {"type": "ephemeral"}}]
    assert diff(body("42"), body(marked)) is None
    assert build_prefix("messages", body(marked)).items[-1].breakpoint


def test_clock_in_system_prompt_named_with_path_offset_and_window() -> None:
    a = anthropic(system=SYSTEM + "Current time: 12:04:31. Go.")
    b = anthropic(system=SYSTEM + "Current time: 12:05:02. Go.")
    d = diff(a, b)
    assert (d.reason, d.segment, d.path) == ("system", "system", "system[0].text")
    # where the clock starts (its hazard's offset), not the first digit that changed
    assert d.offset == len(SYSTEM) + len("Current time: ")
    assert (d.before, d.after) == ("12:04:31", "12:05:02")


def test_reasons() -> None:
    base = anthropic(tools=[{"name": "a", "description": "x"}],
                     messages=[{"role": "user", "content": "1"},
                               {"role": "assistant", "content": "2"},
                               {"role": "user", "content": "3"}])
    assert diff(base, {**base, "model": "claude-opus-4-1"}).reason == "model"
    tools = diff(base, {**base, "tools": [{"name": "a", "description": "y"}]})
    assert (tools.reason, tools.path) == ("tools", "tools[0].description")
    removed = diff(base, {**base, "tools": []})
    assert (removed.reason, removed.path, removed.after) == ("tools", "tools[0]", "(removed)")
    dropped = diff(base, {**base, "messages": base["messages"][2:]})
    assert (dropped.reason, dropped.path) == ("truncated", "messages[0]")
    cut = diff(base, {**base, "messages": base["messages"][:1]})
    assert (cut.reason, cut.after) == ("truncated", "(end)")
    edited = diff(base, {**base, "messages": [{"role": "user", "content": "1!"},
                                              *base["messages"][1:]]})
    assert (edited.reason, edited.path, edited.offset) == (
        "modified", "messages[0].content[0].text", 1)


def test_openai_leading_system_message_is_reason_system() -> None:
    def body(system: str) -> dict[str, Any]:
        return {"model": "gpt-4.1", "messages": [{"role": "system", "content": system},
                                                 {"role": "user", "content": "q"}]}

    d = diff(body("id 7f3a"), body("id 8f3a"), "chat")
    assert (d.reason, d.path, d.offset) == ("system", "messages[0].content[0].text", 3)


def test_responses_with_server_state_compares_only_what_precedes_input() -> None:
    a = {"model": "gpt-5", "instructions": "be brief", "input": "one",
         "previous_response_id": "resp_1"}
    b = {**a, "input": "two"}
    assert diff(a, b, "responses") is None
    changed = diff(a, {**b, "instructions": "be long"}, "responses")
    assert (changed.reason, changed.segment, changed.path) == ("system", "instructions",
                                                               "instructions")


def test_common_prefix_grows_with_the_position_of_the_change() -> None:
    early = diff(anthropic(system="A" + SYSTEM), anthropic(system="B" + SYSTEM))
    late = diff(anthropic(system=SYSTEM + "A"), anthropic(system=SYSTEM + "B"))
    assert early.common < 20 < len(SYSTEM) < late.common


def test_first_difference_shapes() -> None:
    assert first_difference({"a": [1, 2]}, {"a": [1, 2]}) is None
    assert first_difference({"a": [1]}, {"a": [1, 2]})[:2] == (".a[1]", 0)
    assert first_difference({"a": 1}, {"b": 1})[0] == ".b"
    assert first_difference("abc", "abd") == ("", 2, "abc", "abd")
    assert first_difference(1, 1.0)[0] == ""  # int and float are different JSON


def test_window_widens_to_the_token_and_clips() -> None:
    assert window("at 12:04:31.", "at 12:05:02.", 7) == ("12:04:31", "12:05:02", 3)
    assert window("id=ab12 end", "id=ab13 end", 6) == ("ab12", "ab13", 3)
    assert window("x", "xy", 1) == ("x", "xy", 0)
    long_a, long_b = "a" * 200, "b" * 200
    before, after, _ = window(long_a, long_b, 0)
    assert len(before) == 48 and before.endswith("…") and after.startswith("b")
    assert window({"k": 1}, None, 0) == ('{"k":1}', "null", 0)


text = st.text(st.characters(codec="utf-8"), max_size=40)


@given(text, st.lists(text, min_size=1, max_size=5), st.data())
def test_markers_and_string_forms_never_break(system: str, turns: list[str],
                                              data: st.DataObject) -> None:
    """However the cache markers are placed and whichever content form is used, the same
    conversation is the same prefix."""
    def render(marks: list[bool], as_blocks: list[bool]) -> dict[str, Any]:
        msgs = []
        for t, m, blocks in zip(turns, marks, as_blocks, strict=True):
            if blocks or m:
                block: dict[str, Any] = {"type": "text", "text": t}
                if m:
                    block["cache_control"] = {"type": "ephemeral"}
                msgs.append({"role": "user", "content": [block]})
            else:
                msgs.append({"role": "user", "content": t})
        return anthropic(system=system, messages=msgs)

    flags = st.lists(st.booleans(), min_size=len(turns), max_size=len(turns))
    a = render(data.draw(flags), data.draw(flags))
    b = render(data.draw(flags), data.draw(flags))
    assert diff(a, b) is None
    assert build_prefix("messages", a).chain == build_prefix("messages", b).chain


@given(st.text(st.characters(codec="utf-8"), min_size=1, max_size=60), st.integers(min_value=0),
       st.characters(codec="utf-8"))
def test_any_single_change_in_the_system_prompt_is_found_where_it_is(
    system: str, at: int, ch: str
) -> None:
    at %= len(system)
    if system[at] == ch:
        return
    changed = system[:at] + ch + system[at + 1:]
    d = diff(anthropic(system=system), anthropic(system=changed))
    assert (d.reason, d.path, d.offset) == ("system", "system[0].text", at)


def test_an_inline_image_weighs_about_a_thousand_tokens_in_every_shape() -> None:
    data = "iVBORw0KGgo" + "A" * 200_000
    url = "data:image/png;base64," + data
    shapes = [
        ("messages", {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": data}}]}]}),
        ("chat", {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}]}]}),
        ("responses", {"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": url}]}]}),
        ("gemini", {"model": "m", "contents": [{"role": "user", "parts": [
            {"inlineData": {"mimeType": "image/png", "data": data}}]}]}),
    ]
    for api, body in shapes:
        (msg,) = build_prefix(api, body).items
        assert len(msg.canonical) > 200_000 and 4_000 < msg.size < 4_300, api
    # Text that only looks like base64, and an image passed by URL, count as written.
    text = build_prefix("chat", {"model": "m", "messages": [
        {"role": "user", "content": data}]}).items[0]
    assert text.size == len(text.canonical)
    # An image changed after a shared start: what repeats is weighed as the item is.
    a, b = shapes[0][1], {**shapes[0][1]}
    b["messages"] = [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": data[:-10] + "B" * 10}}]}]
    d = diff(a, b)
    assert d is not None and d.common <= build_prefix("messages", a).size
