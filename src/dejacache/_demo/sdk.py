"""The demo's model behind the real ``openai`` SDK.

A loopback server speaks ``POST /v1/chat/completions`` and answers with ``TravelWorld.chat``
(same realistic latency, same answers, tool calls included). The agent talks to it through an
unmodified ``openai.OpenAI`` client, so run 1 is real HTTP through the SDK and run 2 is served by
dejacache's HTTP interception: no decorator on the model call. ``--live`` points the same
client at the real API instead.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..stats import stats
from .agent import Model
from .travel import TravelWorld

__all__ = ["LIVE_MODEL", "loopback_sdk_agent", "openai_available", "real_api_agent"]

LIVE_MODEL = "gpt-4o-mini"

AgentFactory = Callable[[TravelWorld], tuple[Model, dict[str, Callable[..., Any]]]]
Tools = Callable[[TravelWorld], dict[str, Callable[..., Any]]]


def openai_available() -> bool:
    try:
        import openai  # noqa: F401
    except ImportError:
        return False
    return True


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    world: TravelWorld | None = None

    def handle_error(self, request: Any, client_address: Any) -> None:
        return None  # a client that hangs up early is not the demo's problem


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        world = self.server.world
        if self.path.rstrip("/").endswith("/chat/completions") and world is not None:
            status, reply = 200, world.chat(body.get("messages", []), body.get("tools", []))
        else:
            status, reply = 404, {"error": {"message": f"no route {self.path}",
                                            "type": "invalid_request_error"}}
        out = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@contextlib.contextmanager
def loopback_sdk_agent(tools: Tools) -> Iterator[AgentFactory]:
    """An agent factory whose model is ``openai.OpenAI`` talking to a server on 127.0.0.1."""
    import openai

    server = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="dejacache-demo-model", daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    clients: list[Any] = []

    def factory(world: TravelWorld) -> tuple[Model, dict[str, Callable[..., Any]]]:
        server.world = world
        client = openai.OpenAI(base_url=base_url, api_key="demo-no-key-needed", max_retries=0)
        clients.append(client)

        create: Any = client.chat.completions.create  # plain dicts, not the SDK's TypedDicts

        def model(messages: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> Any:
            return create(model="demo-travel-1", messages=messages, tools=schemas)

        return model, tools(world)

    try:
        yield factory
    finally:
        for c in clients:
            c.close()
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextlib.contextmanager
def real_api_agent(tools: Tools) -> Iterator[AgentFactory]:
    """The same agent against the real OpenAI API (``OPENAI_API_KEY``); tools stay local."""
    import openai

    client = openai.OpenAI()
    create: Any = client.chat.completions.create

    def factory(world: TravelWorld) -> tuple[Model, dict[str, Callable[..., Any]]]:
        def model(messages: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> Any:
            misses = stats().total.misses
            reply = create(model=LIVE_MODEL, messages=messages, tools=schemas)
            if stats().total.misses != misses:  # went to the API (not served by dejacache)
                world.model_calls += 1
            return reply

        return model, tools(world)

    setattr(factory, "description", f"OpenAI's {LIVE_MODEL} through the openai SDK")  # noqa: B010
    try:
        yield factory
    finally:
        client.close()
