"""The loopback model of the runtime load harness (``load_runtime.py``): an OpenAI-compatible
``/v1/chat/completions`` that drives the agent's turn from a plan in the user message.

The user message is a JSON list of tool calls ``[[name, {args}], ...]``. The first request
of a turn answers with those tool calls (in parallel, as a model may ask); a request whose
last message is a tool result answers with a short final text. Each answer waits a little
(``MODEL_DELAY_MS``, default 20 ms, jittered) as a model does, varies its wording per call,
and reports token usage with a cached prompt share.

    uvicorn load_model:app --port 8081   (from benchmarks/)
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

_DELAY = float(os.environ.get("MODEL_DELAY_MS", "20")) / 1000
_IDS = itertools.count()
SERVED = {"requests": 0}


def _usage(messages: list[Any]) -> dict[str, Any]:
    size = sum(len(orjson.dumps(m)) for m in messages) // 4
    return {"prompt_tokens": size, "completion_tokens": 12, "total_tokens": size + 12,
            "prompt_tokens_details": {"cached_tokens": size // 2}}


def _answer(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    n = next(_IDS)
    if last.get("role") == "user":
        plan = orjson.loads(last.get("content") or "[]")
        calls = [{"id": f"call_{n}_{i}", "type": "function",
                  "function": {"name": name, "arguments": orjson.dumps(args).decode()}}
                 for i, (name, args) in enumerate(plan)]
        message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
        finish = "tool_calls"
    else:
        seen = sum(1 for m in messages if m.get("role") == "tool")
        message = {"role": "assistant", "content": f"Done ({seen} results, answer {n})."}
        finish = "stop"
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "m"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": _usage(messages)}


async def completions(request: Request) -> Response:
    body = orjson.loads(await request.body())
    SERVED["requests"] += 1
    await asyncio.sleep(_DELAY * (0.5 + random.random()))
    return Response(orjson.dumps(_answer(body)), media_type="application/json")


async def served(request: Request) -> Response:
    return Response(orjson.dumps(SERVED), media_type="application/json")


app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"]),
                        Route("/served", served)])
