"""A scripted travel assistant "model" and its two tools, all local and deterministic.

Each call sleeps for a realistic, repeatable time (model ~120-250 ms, tools ~30-80 ms, drawn
from a hash of the request) so the demo shows real wall-clock savings without a network or an
API key. ``scale`` shrinks the delays for tests.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from typing import Any

import xxhash

__all__ = ["QUESTIONS", "SCHEMAS", "SYSTEM", "TravelWorld"]

SYSTEM = ("You are a travel assistant. Use search_flights to find flights and get_weather for "
          "the forecast at the destination, then answer in two sentences.")

QUESTIONS = (
    "I need to get from Lisbon to Berlin on 2026-12-04. What is the cheapest flight, "
    "and what should I pack?",
    "And from Lisbon to Paris on 2026-12-04?",
)

SCHEMAS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "search_flights",
        "description": "Flights between two cities on a date, cheapest first.",
        "parameters": {"type": "object", "required": ["origin", "destination", "date"],
                       "properties": {"origin": {"type": "string"},
                                      "destination": {"type": "string"},
                                      "date": {"type": "string", "format": "date"}}}}},
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "The forecast for a city on a date.",
        "parameters": {"type": "object", "required": ["city", "date"],
                       "properties": {"city": {"type": "string"},
                                      "date": {"type": "string", "format": "date"}}}}},
]

_ROUTE = re.compile(r"from (\w+) to (\w+) on (\d{4}-\d{2}-\d{2})", re.IGNORECASE)
_AIRLINES = ("TAP", "Lufthansa", "easyJet", "Ryanair", "Air France", "Vueling")
_SKIES = ("light rain", "sunny spells", "overcast", "snow showers", "clear and cold")


def _h(*parts: Any) -> int:
    return xxhash.xxh3_64_intdigest(json.dumps(parts, sort_keys=True).encode())


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)  # ~4 characters per token for English and JSON


@dataclasses.dataclass
class TravelWorld:
    """The fake model and tools, counting what actually ran (a cache hit runs nothing)."""

    scale: float = 1.0
    model_calls: int = 0
    tool_calls: int = 0
    model_seconds: float = 0.0

    def __dejacache_key__(self) -> str:
        # Its answers depend on the arguments alone (the counters change at every call, the
        # scale only stretches the sleeps): its cached methods key no instance data.
        return "travel-world"

    @property
    def live_calls(self) -> int:
        return self.model_calls + self.tool_calls

    def _sleep(self, lo_ms: float, hi_ms: float, seed: int) -> float:
        seconds = (lo_ms + (seed % 1000) / 999 * (hi_ms - lo_ms)) / 1000 * self.scale
        time.sleep(seconds)
        return seconds

    # ------------------------------------------------------------------ tools

    def search_flights(self, origin: str, destination: str, date: str) -> dict[str, Any]:
        self.tool_calls += 1
        seed = _h("flights", origin, destination, date)
        self._sleep(30, 80, seed)
        flights: list[dict[str, Any]] = []
        for i in range(3):
            s = _h(seed, i)
            dep = 6 * 60 + s % (14 * 60)
            dur = 150 + s % 90
            flights.append({
                "flight": f"{_AIRLINES[s % len(_AIRLINES)]} {100 + s % 900}",
                "departs": f"{dep // 60:02d}:{dep % 60:02d}",
                "arrives": f"{(dep + dur) // 60 % 24:02d}:{(dep + dur) % 60:02d}",
                "price_eur": 59 + s % 240,
            })
        flights.sort(key=lambda f: f["price_eur"])
        return {"origin": origin, "destination": destination, "date": date, "flights": flights}

    def get_weather(self, city: str, date: str) -> dict[str, Any]:
        self.tool_calls += 1
        seed = _h("weather", city, date)
        self._sleep(30, 80, seed)
        low = -3 + seed % 9
        return {"city": city, "date": date, "sky": _SKIES[seed % len(_SKIES)],
                "low_c": low, "high_c": low + 3 + seed % 6}

    def tools(self) -> dict[str, Any]:
        return {"search_flights": self.search_flights, "get_weather": self.get_weather}

    # ------------------------------------------------------------------ model

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """One chat.completions call: decide the next tool call, or answer."""
        self.model_calls += 1
        request = json.dumps([messages, tools], sort_keys=True)
        t0 = time.perf_counter()
        self._sleep(120, 250, _h(request))
        self.model_seconds += time.perf_counter() - t0
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results: dict[str, Any] = {}
        for m in messages[last_user + 1:]:
            if m["role"] == "tool":
                data = json.loads(m["content"])
                results["flights" if "flights" in data else "weather"] = data
        route = _ROUTE.search(messages[last_user]["content"])
        if route is None:
            return self._reply(request, content="Tell me where from, where to and the date "
                               "(for example: from Lisbon to Berlin on 2026-12-04).")
        origin, dest, date = route.groups()
        if "flights" not in results:
            return self._reply(request, call=("search_flights",
                                              {"origin": origin, "destination": dest,
                                               "date": date}))
        if "weather" not in results:
            return self._reply(request, call=("get_weather", {"city": dest, "date": date}))
        best = results["flights"]["flights"][0]
        w = results["weather"]
        pack = "a warm coat" if w["high_c"] < 6 else "a light jacket"
        if "rain" in w["sky"] or "snow" in w["sky"]:
            pack += " and an umbrella"
        text = (f"The cheapest {origin} to {dest} flight on {date} is {best['flight']}, "
                f"leaving {best['departs']} and landing {best['arrives']}, for "
                f"EUR {best['price_eur']}. {dest} will have {w['sky']}, "
                f"{w['low_c']} to {w['high_c']} C: pack {pack}.")
        return self._reply(request, content=text)

    @staticmethod
    def _reply(request: str, *, content: str | None = None,
               call: tuple[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        seed = _h(request)
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        out_text = content or ""
        if call is not None:
            args = json.dumps(call[1])
            # A stable id: it is fed back in the next request, so a random one would make every
            # later step of a re-run miss.
            message["tool_calls"] = [{"id": f"call_{_h(call[0], args):016x}", "type": "function",
                                      "function": {"name": call[0], "arguments": args}}]
            out_text = args
        prompt, completion = _tokens(request), _tokens(out_text) + 8
        return {
            "id": f"chatcmpl-demo{seed:016x}",
            "object": "chat.completion",
            "created": 1_790_000_000 + seed % 1_000_000,
            "model": "demo-travel-1",
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "tool_calls" if call else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        }
