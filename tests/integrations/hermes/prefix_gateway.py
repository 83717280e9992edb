"""One chat, three gateways: what each does to the provider's prompt cache.

Shared by ``test_integration_hermes_prefix.py`` and ``benchmarks/agent_pool_prefix.py``. Every
message of the conversation arrives with the agent config a gateway would build for it, and,
as gateway users do, an ephemeral system prompt that starts with the current time and the
triggering message id, followed by long, stable house rules. hermes appends the ephemeral
prompt to its own (frozen) system prompt on every request.

- ``fresh``: a new ``AIAgent`` per message (hermes' gateway before its agent cache).
- ``volatile``: an ``AgentPool`` whose signature holds the whole ephemeral prompt, the
  gateway's own rule: the message id changes it, so the agent is rebuilt every message
  (hermes-agent PR #55595).
- ``pooled``: an ``AgentPool`` whose signature holds the prompt's stable part; the agent built
  for the first message keeps its prompt, the clock and id included, for the whole session
  (as hermes freezes its own date line at build time).
- ``moved``: a fresh agent per message as ``fresh``, but the per-message header (clock and
  message id) goes at the start of the user message instead of the system prompt: the
  prompt-cache planner's ``move`` fix, the agent seeing the same facts.

Requests reach the caching loopback provider (``tests/runtime/cache_provider.py``), which
reports ``prompt_tokens_details.cached_tokens``; a ``PrefixMonitor`` watches them. hermes must
be importable (``.venv-hermes``) and its environment set (see this directory's conftest).
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import re
from collections.abc import Iterator, Mapping
from typing import Any

from dejacache import AgentPool, PrefixMonitor
from dejacache.runtime import PoolStats

__all__ = ["GATEWAYS", "HERMES_DATE", "MODEL", "RULES", "VOLATILE_SIGNATURE", "Message", "Run",
           "conversation", "ephemeral", "hermes_config", "pinned_hermes_date", "run_gateway",
           "stable_signature"]

MODEL = "gpt-4.1"  # priced in the cassette price table: $2/M input, cached 0.25x
GATEWAYS = ("fresh", "volatile", "pooled", "moved")
RULES = (
    "House rules for this chat: answer in the user's language; keep answers under five "
    "sentences unless asked for more; name the tool you used and why; never reveal internal "
    "ids, keys or file paths; ask one clarifying question when a request is ambiguous. "
) * 30  # ~1,300 tokens: hermes' own prompt plus these pass OpenAI's 1,024-token minimum
# The per-message header gateway users put in front of their ephemeral prompt.
_HEADER = re.compile(r"\ACurrent time: [^\n]*\nTriggering message id: [^\n]*\n\n")
HERMES_DATE = datetime.datetime(2026, 5, 1, 12, 0, tzinfo=datetime.UTC)
# The gateway's signature inputs (hermes' ``_agent_config_signature`` and the constructor-only
# options), the ephemeral prompt aside.
_STABLE = ("model", "provider", "base_url", "api_key", "api_mode", "enabled_toolsets",
           "platform", "max_iterations", "quiet_mode", "skip_context_files", "skip_memory")
VOLATILE_SIGNATURE = (*_STABLE, "ephemeral_system_prompt")  # hermes' rule: the whole prompt


@dataclasses.dataclass(frozen=True)
class Message:
    text: str
    now: str  # HH:MM:SS, the gateway's clock when the message arrived
    message_id: int


def conversation(turns: int = 5) -> list[Message]:
    """The chat: one message every 31 s from 12:04:31, ids from 1001."""
    texts = ["Paris to Lyon tomorrow?", "And back on Sunday?", "Any night trains?",
             "Book the first one.", "Send me the ticket.", "Thanks!", "One more question.",
             "What about Marseille?"]
    seconds = itertools.count(12 * 3600 + 4 * 60 + 31, 31)
    out = []
    for i, s in zip(range(turns), seconds, strict=False):
        now = f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
        out.append(Message(texts[i % len(texts)], now, 1001 + i))
    return out


def ephemeral(message: Message) -> str:
    return (f"Current time: 2026-05-01 {message.now}\n"
            f"Triggering message id: {message.message_id}\n\n{RULES}")


def stable_signature(config: Mapping[str, Any]) -> dict[str, Any]:
    """The pooled gateway's signature: its config, and the ephemeral prompt without the
    per-message header. Reading ``ephemeral_system_prompt`` here puts it inside the
    signature, so the pool never sets a later message's prompt on the agent; an edit to the
    rules still changes the signature and rebuilds it."""
    inputs = {name: config.get(name) for name in _STABLE}
    inputs["ephemeral_system_prompt"] = _HEADER.sub("", config.get("ephemeral_system_prompt")
                                                    or "")
    return inputs


def hermes_config(base_url: str) -> dict[str, Any]:
    return {
        "model": MODEL, "provider": "custom", "base_url": base_url,
        "api_key": "sk-hermes-test-0123456789", "api_mode": "chat_completions",
        "enabled_toolsets": [], "platform": "telegram", "max_iterations": 3,
        "quiet_mode": True, "skip_context_files": True, "skip_memory": True,
    }


class pinned_hermes_date:  # lower case: a context manager, like dejacache.scope
    """hermes writes the day into its system prompt at build time; pin it, so a run across
    midnight does not add a second, unrelated difference."""

    def __enter__(self) -> None:
        import hermes_time

        self._real = hermes_time.now
        hermes_time.now = lambda: HERMES_DATE

    def __exit__(self, *exc: object) -> None:
        import hermes_time

        hermes_time.now = self._real


@dataclasses.dataclass
class Run:
    gateway: str
    session: str  # the monitor's name for the conversation
    monitor: PrefixMonitor
    built: int  # AIAgents constructed
    stats: PoolStats | None
    bodies: list[dict[str, Any]]  # the chat requests the provider received


def _agents() -> tuple[Any, list[Any]]:
    from run_agent import AIAgent

    built: list[Any] = []

    def factory(**config: Any) -> Any:
        agent = AIAgent(**config)
        built.append(agent)
        return agent

    return factory, built


def _turns(messages: list[Message]) -> Iterator[tuple[Message, str]]:
    for m in messages:
        yield m, ephemeral(m)


def _header(m: Message) -> str:
    return ephemeral(m)[:-len(RULES)]


def run_gateway(gateway: str, provider: Any, messages: list[Message],
                session: str = "telegram:42", *, trace: Any = None) -> Run:
    """Run ``messages`` as one chat through ``gateway`` against ``provider`` (a
    ``CachingProvider``, cleared first: each gateway starts cold). ``trace``: a file the
    monitor writes each request to (``PrefixMonitor(trace=...)``)."""
    if gateway not in GATEWAYS:
        raise ValueError(f"gateway must be one of {GATEWAYS}, not {gateway!r}")
    provider.clear()
    start = len(provider.requests)
    config = hermes_config(provider.url + "/v1")
    factory, built = _agents()
    monitor = PrefixMonitor(trace=trace)
    history: list[Any] | None = None
    stats = None
    if gateway in ("fresh", "moved"):
        # No pool, no lease: hermes sends from a bare thread it starts, which the monitor
        # reaches on its own (it watches, never caches). The conversation is its block.
        with pinned_hermes_date(), monitor:
            for m, prompt in _turns(messages):
                text = m.text
                if gateway == "moved":
                    prompt, text = RULES, _header(m) + m.text
                agent = factory(**config, ephemeral_system_prompt=prompt)
                try:
                    history = agent.run_conversation(
                        text, conversation_history=history)["messages"]
                finally:
                    agent.release_clients()
        name = next(iter(monitor.report()), "")
    else:
        signature: Any = VOLATILE_SIGNATURE if gateway == "volatile" else stable_signature
        pool: AgentPool[Any] = AgentPool(factory, signature=signature,
                                         on_evict=lambda a: a.release_clients())
        # A gateway's production setup: the monitor alone; the lease carries its session
        # into hermes' request thread.
        try:
            with pinned_hermes_date(), monitor:
                for m, prompt in _turns(messages):
                    with pool.lease(session, **config, ephemeral_system_prompt=prompt) as agent:
                        history = agent.run_conversation(
                            m.text, conversation_history=history)["messages"]
        finally:
            pool.close()
        stats = pool.stats()
        name = session
    bodies = [b for b in provider.requests[start:] if "messages" in b]
    return Run(gateway, name, monitor, len(built), stats, bodies)
