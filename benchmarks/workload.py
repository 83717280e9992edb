"""Seeded agent-shaped payloads: OpenAI chat-completions requests and responses.

A request is what an agent passes to ``client.chat.completions.create(**request)``: a model,
sampling settings, a list of tool schemas and a conversation (system prompt, then rounds of
user question -> assistant tool calls -> tool results -> assistant reply, then a new
question). Sizes are the compact-JSON length: ~2 KB, ~20 KB, ~200 KB. A response is a
``chat.completion`` of ~1.2 KB with a ``usage`` block.

Built from ``random.Random(f"...{seed}")`` only, so every process builds identical bytes.
"""

from __future__ import annotations

import json
import random
from typing import Any

__all__ = ["SIZES", "make_request", "make_response", "nbytes", "pairs", "step"]

SIZES: dict[str, int] = {"2KB": 2_000, "20KB": 20_000, "200KB": 200_000}

_VOCAB_TEXT = (
    "itinerary fare seat aisle window layover terminal gate baggage allowance refund voucher "
    "hotel room checkin checkout breakfast shuttle museum ticket opening hours forecast rain "
    "wind sunny humidity umbrella jacket budget cheapest fastest direct connection airline "
    "passenger booking reference confirm cancel change date morning evening weekend price "
    "currency euro dollar total tax fee discount member loyalty points upgrade lounge visa "
    "passport border customs arrival departure delay status platform train bus taxi route "
    "map distance walking minutes nearby restaurant vegetarian reservation table tonight "
    "please could you find show compare check list book the a of to for in on with and or"
)
_VOCAB = _VOCAB_TEXT.split()

# label -> (tool schemas, properties per tool, rows per tool result, system sentences)
_SHAPE = {"2KB": (1, 2, 1, 2), "20KB": (4, 4, 3, 10), "200KB": (10, 6, 9, 28)}


def nbytes(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_VOCAB) for _ in range(words)).capitalize() + "."


def _schema(rng: random.Random, idx: int, n_props: int) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for j in range(n_props):
        kind = ("string", "integer", "boolean", "number", "array")[rng.randrange(5)]
        spec: dict[str, Any] = {"type": kind, "description": _text(rng, rng.randint(5, 12))}
        if kind == "array":
            spec["items"] = {"type": "string"}
        props[f"{rng.choice(_VOCAB)}_{j}"] = spec
    return {"type": "function", "function": {
        "name": f"{rng.choice(_VOCAB)}_{rng.choice(_VOCAB)}_{idx}",
        "description": _text(rng, rng.randint(12, 30)),
        "parameters": {"type": "object", "properties": props,
                       "required": sorted(props)[: max(1, n_props // 2)]}}}


def _round(rng: random.Random, tools: list[dict[str, Any]], rows: int, n: int) -> list[Any]:
    fn = tools[rng.randrange(len(tools))]["function"]
    args = {p: rng.choice(_VOCAB) for p in list(fn["parameters"]["properties"])[:2]}
    call_id = f"call_{rng.getrandbits(96):024x}"
    result = {"rows": [{"id": rng.randrange(10**6), "name": _text(rng, 3),
                        "detail": _text(rng, rng.randint(10, 25)),
                        "score": round(rng.random(), 3)} for _ in range(rng.randint(1, rows))]}
    return [
        {"role": "user", "content": _text(rng, rng.randint(10, 30))},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": fn["name"], "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)},
        {"role": "assistant", "content": _text(rng, rng.randint(15, 45)) + f" ({n})"},
    ]


def make_request(size: str, seed: int = 0) -> dict[str, Any]:
    """A chat-completions request whose compact JSON is within a few % of ``SIZES[size]``."""
    target = SIZES[size]
    rng = random.Random(f"dejacache-bench-request/{size}/{seed}")
    n_tools, n_props, rows, n_sys = _SHAPE[size]
    tools = [_schema(rng, i, n_props) for i in range(n_tools)]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": " ".join(_text(rng, 14) for _ in range(n_sys))}]
    req: dict[str, Any] = {"model": "gpt-4o-mini", "temperature": 0, "tool_choice": "auto",
                           "parallel_tool_calls": True, "tools": tools, "messages": messages}
    n = 0
    while nbytes(req) < target * 0.85:
        messages.extend(_round(rng, tools, rows, n))
        n += 1
    if nbytes(req) > target * 1.05 and n > 1:
        del messages[-4:]
    question = {"role": "user", "content": _text(rng, 8)}
    messages.append(question)
    while nbytes(req) < target * 0.98:
        question["content"] += " " + _text(rng, 8)
    return req


def make_response(seed: int = 0) -> dict[str, Any]:
    """A ~1.2 KB ``chat.completion`` with a usage block (odd seeds carry a tool call)."""
    rng = random.Random(f"dejacache-bench-response/{seed}")
    message: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
    finish = "stop"
    if seed % 2:
        message["tool_calls"] = [{"id": f"call_{rng.getrandbits(96):024x}", "type": "function",
                                  "function": {"name": "search_flights", "arguments": json.dumps(
                                      {"origin": "LIS", "destination": "BER", "limit": 5})}}]
        finish = "tool_calls"
    while nbytes(message) < 760:
        message["content"] = (message["content"] + " " + _text(rng, 12)).strip()
    prompt, completion = rng.randint(400, 50_000), rng.randint(20, 500)
    return {
        "id": f"chatcmpl-{rng.getrandbits(116):029x}", "object": "chat.completion",
        "created": 1_790_000_000 + seed, "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": f"fp_{rng.getrandbits(40):010x}",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}},
    }


def step(base: dict[str, Any], i: int, tag: str = "") -> dict[str, Any]:
    """The next distinct request of the same run: only the final question changes, every other
    object is shared with ``base`` (cheap to make thousands)."""
    messages = list(base["messages"])
    messages[-1] = {**messages[-1], "content": f"{messages[-1]['content']} [{tag}{i}]"}
    return {**base, "messages": messages}


def pairs(size: str, n: int, seed0: int = 0) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``n`` distinct (request, response) pairs of one size."""
    return [(make_request(size, seed0 + k), make_response(seed0 + k)) for k in range(n)]


if __name__ == "__main__":
    for label in SIZES:
        r = make_request(label)
        print(f"{label}: {nbytes(r):,} bytes, {len(r['messages'])} messages, "
              f"{len(r['tools'])} tools")
    print(f"response: {nbytes(make_response(0)):,} / {nbytes(make_response(1)):,} bytes")
