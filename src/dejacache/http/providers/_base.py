"""What a provider module declares: how to recognise its endpoints and what its data means."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ...stats import with_cached_parts

__all__ = ["END", "FINISHING", "IN_PROGRESS", "Provider", "int_fields", "last_str", "usage_ints",
           "walk_ids"]

# Where one SSE event leaves a streamed answer (``Provider.stage``).
IN_PROGRESS = 0
FINISHING = 1  # the answer is complete; only the end marker (and trailing usage) may follow
END = 2  # the end marker: nothing the caller needs comes after it


class Provider:
    """Provider knowledge used by the HTTP layer. Subclass it in one module per provider.

    - ``matches``: does this request go to one of our endpoints?
    - ``endpoint``: the call name, e.g. ``"openai.chat.completions"`` (stats, misses, keys).
    - ``volatile``: request body fields that never change the answer (dropped from keys).
    - ``cache_fields``: paths of the prompt-cache controls a body may carry (keyed without
      them, stored with them: ``_core/cache_fields.py``).
    - ``alias_keys``: response fields holding ids the client may send back later; their values
      are aliased by the call that got them within a block (``http/aliases.py``), so
      re-recording one turn does not break the next.
    - ``url_id``: the id a URL names whose answer is that object (polling a background job).
    - ``usage``: token counts from a JSON body or from the parsed events of a stream (SSE, or
      NDJSON lines), under the names ``stats`` and the price table read (``prompt_tokens`` /
      ``completion_tokens`` / ``total_tokens``, or Anthropic's ``input_tokens`` ...).
    - ``model``: the model that answered, when the answer names it (prices a replayed call).
    - ``asks_stream``: whether a request asks for a streamed answer (default: a JSON body
      with ``"stream": true``; Gemini and Bedrock say so in the path).
    - ``for_request``: the provider for one request; one whose answers do not name their
      model (Bedrock: the model is in the path) returns a copy that knows it for ``model``.
    - ``upstream``: where the provider's API lives (``dejacache proxy``'s built-in upstream
      of this name; ``{region}`` stands for the AWS region the request is signed for).
    - ``error_answer``: an error in the provider's own shape, so its SDK raises its own API
      error carrying the message (what ``dejacache proxy`` answers a replay miss with).

    A module may be matched wrongly (an unrelated service on the same path): that must only
    change names and usage, never which answer is served. So ``matches`` looks at the host,
    the path and the SDK's own headers, and ``volatile`` holds only fields that cannot change
    an answer whichever service receives them.
    """

    name = "http"
    priority = 100  # lower is tried first; the generic fallback is last
    volatile: frozenset[str] = frozenset()
    cache_fields: tuple[str, ...] = ()
    alias_keys: frozenset[str] = frozenset({"id", "call_id"})
    upstream: str | None = None

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        raise NotImplementedError

    def endpoint(self, host: str, path: str) -> str:
        raise NotImplementedError

    def for_request(self, host: str, path: str) -> Provider:
        return self

    def vouched(self, host: str, headers: Mapping[str, str]) -> bool:
        """Whether the request is surely this provider's (its host, or its SDK's own
        headers), so ``volatile`` may be dropped from its key. A module matched by a path
        alone may have matched another service, where those fields are data."""
        return True

    def unvouched(self) -> Provider:
        """This provider keying every field (``volatile`` empty): one copy, made once."""
        plain: Provider | None = self.__dict__.get("_unvouched")
        if plain is None:
            plain = copy.copy(self)
            plain.volatile = frozenset()
            self._unvouched = plain
        return plain

    def stage(self, event: str) -> int:
        """Where this SSE event leaves the answer: ``IN_PROGRESS``, ``FINISHING`` or ``END``.

        Called once per event while a live stream is recorded, so it must stay a cheap string
        check. Callers such as litellm stop reading at the finishing event and never close
        the response: the recorder reads ahead to ``END`` before handing that event
        over, so such a stream is stored all the same.
        """
        return IN_PROGRESS

    def usage(self, body: Any, events: Iterable[Any]) -> dict[str, int] | None:
        """Token counts; the default looks for an OpenAI-style ``usage`` object."""
        found = _usage_block(body)
        for ev in events:
            found = _usage_block(ev) or found
        return found

    def model(self, body: Any, events: Iterable[Any]) -> str | None:
        """The model that answered, stored with the answer when known (None: not stored)."""
        return None

    def asks_stream(self, path: str, body: Any) -> bool:
        """Whether the request asks for a stream: then the caller gets it as it arrives."""
        return type(body) is dict and body.get("stream") is True

    def ids(self, body: Any, events: Iterable[Any]) -> list[str]:
        """Ids in order of first appearance (JSON body first, then each event)."""
        seen: dict[str, None] = {}
        keys = self.alias_keys
        if body is not None:
            seen.update((i, None) for i in walk_ids(body, keys))
        for ev in events:
            seen.update((i, None) for i in walk_ids(self.event_for_ids(ev), keys))
        return list(seen)

    def url_id(self, path: str) -> str | None:
        """The id in ``path`` of the object whose answer carries it as its own ``id``
        (``GET /v1/responses/{id}``), or None. A recorded answer to such a request names
        the object by the id it had when recorded; replay keys that id like the URL's."""
        return None

    def event_for_ids(self, event: Any) -> Any:
        """The part of one stream event that holds its ids (the event itself by default)."""
        return event

    def error_answer(self, status: int, kind: str, message: str
                     ) -> tuple[dict[str, str], Any]:
        """(headers, JSON body) of an error answer with HTTP ``status``; ``kind`` is a
        machine-readable type (``dejacache_replay_miss``). The default is OpenAI's shape,
        which most compatible servers and SDKs read."""
        return {}, {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _usage_block(obj: Any) -> dict[str, int] | None:
    if not isinstance(obj, dict):
        return None
    usage = obj.get("usage")
    if not isinstance(usage, dict):
        resp = obj.get("response")  # responses API stream: response.completed carries usage
        usage = resp.get("usage") if isinstance(resp, dict) else None
    if not isinstance(usage, dict):
        return None
    return usage_ints(usage) or None


def usage_ints(usage: Any) -> dict[str, int]:
    """The integer counts of a usage object, with the cache counts a provider nests (OpenAI's
    cached prompt tokens, Anthropic's 1-hour cache writes) lifted beside them: prices read
    them, totals never add them (``stats.with_cached_parts``)."""
    out = int_fields(usage)
    return with_cached_parts(out, usage) if out else out


def int_fields(obj: Any) -> dict[str, int]:
    """The integer fields of a JSON object (``{}`` for anything else): token counts."""
    if not isinstance(obj, dict):
        return {}
    return {k: v for k, v in obj.items() if type(v) is int}


def last_str(field: str, body: Any, events: Iterable[Any]) -> str | None:
    """The last non-empty string ``field`` at the top of the body or of any event."""
    found = None
    for obj in (body, *events):
        if isinstance(obj, dict):
            v = obj.get(field)
            if type(v) is str and v:
                found = v
    return found


def walk_ids(obj: Any, keys: frozenset[str]) -> Iterator[str]:
    """String values of ``keys`` anywhere in a JSON tree, depth first, in document order."""
    t = type(obj)
    if t is dict:
        for k, v in obj.items():
            if k in keys and type(v) is str and v:
                yield v
            elif type(v) is dict or type(v) is list:
                yield from walk_ids(v, keys)
    elif t is list:
        for v in obj:
            if type(v) is dict or type(v) is list:
                yield from walk_ids(v, keys)
