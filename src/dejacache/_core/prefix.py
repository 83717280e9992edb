"""A request as the provider caches it: its prefix as a chain of segment digests, and where two
consecutive requests of a conversation first part ways.

Providers cache the *rendered* prompt, in a fixed order (Anthropic: tools → system → messages;
OpenAI chat: tools → messages; Responses: tools → instructions → input; Gemini, whose order is
not documented: system instruction → tools → contents), so a request is cut
into items in that order (one tool, one system block, one message), each normalised to what
the provider renders and digested with the same canonical JSON and digest as call keys. The
running digest of items ``0..i`` (``Prefix.chain``) answers "is the first i items' prefix the
same" in one comparison, which is both the prefix-cache question and a key of "everything
before this message": one mechanism serves both keys and the monitor.

Normalisation, so that what is *not* a change to the provider is not reported as one: a
cache marker (Anthropic's ``cache_control``, OpenAI's ``prompt_cache_breakpoint``) moved between
blocks, and a string ``content`` versus the same text as one text block, render the same tokens
(cc-viewer and similar tools compare raw JSON and report both as breaks). Markers are kept as
item flags (``breakpoint``, ``long``), with the request's routing key and lifetime: what the
provider's cache model (``cache_model.py``) reads.

Pure: no clock, no I/O. ``runtime/prefix.py`` drives it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..keys import canonical_json, digest
from .spans import span_at

__all__ = [
    "Difference",
    "Item",
    "Prefix",
    "api_of",
    "build_prefix",
    "chained",
    "compare",
    "first_difference",
    "item",
    "shared",
    "window",
]

# Segment order per API; a difference in an earlier segment invalidates everything after it.
ORDER: dict[str, tuple[str, ...]] = {
    "messages": ("tools", "system", "settings", "messages"),
    "chat": ("tools", "settings", "messages"),
    "responses": ("tools", "settings", "instructions", "input"),
    "gemini": ("system", "tools", "messages"),
}


@dataclasses.dataclass(frozen=True, slots=True)
class Item:
    """One cacheable unit of a prefix: a tool, a system block, a message."""

    segment: str
    path: str  # "system[0]", "messages[3]", "tools[1]", "instructions"
    data: Any  # normalised JSON value
    canonical: bytes
    digest: str
    breakpoint: bool = False  # carries a cache marker (a cache write point)
    system_like: bool = False  # a leading system/developer message (OpenAI chat)
    long: bool = False  # the marker asks for the long lifetime (Anthropic 1 h, OpenAI 12 h)
    blocks: int = 1  # content blocks (what Anthropic's breakpoint lookback counts)
    # Characters of inline image data, less what the images weigh as tokens (_IMAGE_CHARS
    # each): what ``size`` leaves out so that it stays proportional to the prompt's tokens.
    images: int = 0

    @property
    def size(self) -> int:
        """The item's weight in characters of canonical JSON, an image counted as the
        characters of its tokens rather than of its base64."""
        return len(self.canonical) - self.images


@dataclasses.dataclass(frozen=True, slots=True)
class Prefix:
    """A request's cacheable prefix, in provider order."""

    provider: str  # "anthropic" | "openai" | "gemini"
    api: str  # "messages" | "chat" | "responses" | "gemini" (generateContent)
    model: str
    items: tuple[Item, ...]
    chain: tuple[str, ...]  # chain[i]: digest of items[0..i]
    one_hour: bool = False  # a cache_control asks for the 1 h lifetime (Anthropic)
    retention: str = ""  # OpenAI prompt_cache_retention ("24h" extends the lifetime)
    # Responses with previous_response_id: the conversation lives on the server and the
    # input holds only new items, so it is not compared item by item.
    stateful: bool = False
    route: str = ""  # OpenAI prompt_cache_key: part of what picks the machine
    explicit: bool = False  # OpenAI prompt_cache_options mode "explicit": no implicit point
    # Leading items held in an explicit cache the request names (Gemini's CachedContent): the
    # planner's fix, priced; 0 for a request as sent.
    pinned: int = 0

    @property
    def size(self) -> int:
        return sum(i.size for i in self.items)

    @property
    def long_lived(self) -> bool:
        """The request asks for the provider's longer cache lifetime."""
        return self.one_hour or self.retention == "24h" or any(i.long for i in self.items)

    def breakpoints(self) -> list[int]:
        """Character offsets where the provider writes a cache entry (end of marked items)."""
        out, at = [], 0
        for item in self.items:
            at += item.size
            if item.breakpoint:
                out.append(at)
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class Difference:
    """Where ``cur`` first parts from ``prev``."""

    reason: str  # model | tools | system | settings | truncated | modified
    segment: str
    path: str  # JSON path of the first differing value
    offset: int  # character offset inside that value
    before: str
    after: str
    common: int  # characters of prefix the two share (cacheable for cur)


# ---------------------------------------------------------------- normalisation


# Cache markers a content block may carry, and the lifetime that makes each one long.
_MARKERS = {"cache_control": "1h", "prompt_cache_breakpoint": "12h"}


def _strip_marker(block: Any) -> tuple[Any, bool, bool]:
    """A content block without its cache markers (``cache_control``,
    ``prompt_cache_breakpoint``): (block, had a marker, a marker asks for the long
    lifetime)."""
    if type(block) is not dict or not any(k in block for k in _MARKERS):
        return block, False, False
    marked = long = False
    for name, ttl in _MARKERS.items():
        mark = block.get(name)
        if mark is not None:
            marked = True
            long |= isinstance(mark, dict) and mark.get("ttl") == ttl
    return {k: v for k, v in block.items() if k not in _MARKERS}, marked, long


def _blocks(content: Any, text_type: str = "text") -> tuple[Any, bool, bool]:
    """Content as a list of blocks (a string is one text block), markers removed, including
    those inside tool_result content."""
    if isinstance(content, str):
        return [{"type": text_type, "text": content}], False, False
    if not isinstance(content, list):
        return content, False, False
    out, marked, hour = [], False, False
    for block in content:
        b, m, h = _strip_marker(block)
        if type(b) is dict and "content" in b and b.get("type") == "tool_result":
            inner, m2, h2 = _blocks(b["content"])
            b = {**b, "content": inner}
            m, h = m or m2, h or h2
        out.append(b)
        marked, hour = marked or m, hour or h
    return out, marked, hour


# A provider counts an image's tokens from its pixels, not its bytes: ~1,600 for a
# 1.15-megapixel image at Anthropic, 765 for a 1024x1024 one at OpenAI's high detail, 258 a
# 768-pixel tile at Gemini. Counted as its base64 (1.3 MB for a 1 MB photo), one image
# outweighed a 2,000-token system prompt ~100 to 1, and scaling the reported prompt tokens
# by characters put that system prompt's breakpoint under the minimum: a plan predicted 0%
# where the provider reported 37%. So an inline image weighs about a thousand tokens.
_IMAGE_CHARS = 4_000
_IMAGE_TYPES = ("media_type", "mimeType", "mime_type")


def _image_chars(value: Any) -> int:
    """Characters of inline base64 image data in ``value`` (a data: URL, or the ``data`` of
    an object whose media type is an image), less ``_IMAGE_CHARS`` for each image."""
    out, stack = 0, [value]
    while stack:
        v = stack.pop()
        if type(v) is str:
            if v.startswith("data:image/") and ";base64," in v[:80]:
                out += max(0, len(v) - _IMAGE_CHARS)
        elif type(v) is dict:
            data = v.get("data")
            if type(data) is str and any(str(v.get(k, "")).startswith("image/")
                                         for k in _IMAGE_TYPES):
                out += max(0, len(data) - _IMAGE_CHARS)
                stack.extend(x for k, x in v.items() if k != "data")
            else:
                stack.extend(v.values())
        elif type(v) is list:
            stack.extend(v)
    return out


def _canon(value: Any) -> bytes:
    # canonical_json keys a mapping of arguments; one fixed argument name makes any JSON value
    # one (the wrapper adds the same few bytes to every item, so sizes stay comparable).
    return canonical_json({"": value})


class _Builder:
    def __init__(self) -> None:
        self.items: list[Item] = []
        self.one_hour = False

    def add(self, segment: str, path: str, data: Any, *, breakpoint: bool = False,
            system_like: bool = False, long: bool = False) -> None:
        canon = _canon(data)
        content = data.get("content") if type(data) is dict else None
        blocks = len(content) if type(content) is list and content else 1
        self.items.append(Item(segment, path, data, canon, digest("prefix", segment, canon),
                               breakpoint, system_like, long, blocks,
                               _image_chars(data) if b"image/" in canon else 0))

    def tools(self, tools: Any) -> None:
        for i, tool in enumerate(tools if isinstance(tools, list) else []):
            t, marked, hour = _strip_marker(tool)
            self.one_hour |= hour
            self.add("tools", f"tools[{i}]", t, breakpoint=marked, long=hour)

    def prefix(self, provider: str, api: str, model: Any, *, retention: str = "",
               stateful: bool = False, body: Mapping[str, Any] | None = None) -> Prefix:
        return chained(provider, api, str(model or ""), self.items, one_hour=self.one_hour,
                       retention=retention, stateful=stateful, **_routing(body))


def _routing(body: Mapping[str, Any] | None) -> dict[str, Any]:
    """OpenAI's routing key and breakpoint mode, from the request body."""
    if body is None:
        return {}
    options = body.get("prompt_cache_options")
    key = body.get("prompt_cache_key")
    return {"route": key if isinstance(key, str) else "",
            "explicit": isinstance(options, dict) and options.get("mode") == "explicit"}


def chained(provider: str, api: str, model: str, items: Iterable[Item], **fields: Any
            ) -> Prefix:
    """A :class:`Prefix` of ``items``, its digest chain computed (``fields``: the other
    members of :class:`Prefix`)."""
    listed = tuple(items)
    chain, prev = [], ""
    for item in listed:
        prev = digest("prefix", "chain", prev.encode() + item.digest.encode())
        chain.append(prev)
    return Prefix(provider, api, model, listed, tuple(chain), **fields)


def item(segment: str, path: str, data: Any, **flags: Any) -> Item:
    """One :class:`Item` of ``data`` (normalised JSON), digested as the builders digest."""
    b = _Builder()
    b.add(segment, path, data, **flags)
    return b.items[0]


_MESSAGE_SETTINGS = ("tool_choice", "thinking")


def _anthropic(body: Mapping[str, Any]) -> Prefix:
    b = _Builder()
    b.tools(body.get("tools"))
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    for i, block in enumerate(system if isinstance(system, list) else [system]):
        sb, m, h = _strip_marker(block)
        b.one_hour |= h
        b.add("system", f"system[{i}]", sb, breakpoint=m, long=h)
    # Anthropic keeps the tools' and system's entries when these change, and drops every
    # entry of the messages (its list of what invalidates the cache): one item between them,
    # holding no content block, so a change breaks the prefix exactly there.
    settings = {k: body[k] for k in _MESSAGE_SETTINGS if body.get(k) is not None}
    if settings:
        b.add("settings", ", ".join(settings), settings)
        b.items[-1] = dataclasses.replace(b.items[-1], blocks=0)
    for i, msg in enumerate(body.get("messages") or []):
        if type(msg) is not dict:
            b.add("messages", f"messages[{i}]", msg)
            continue
        content, m, h = _blocks(msg.get("content"))
        b.one_hour |= h
        b.add("messages", f"messages[{i}]", {**msg, "content": content}, breakpoint=m, long=h)
    top = body.get("cache_control")
    if isinstance(top, dict) and b.items:
        # Top-level cache_control: the API places the marker on the last cacheable block.
        hour = top.get("ttl") == "1h"
        last = b.items[-1]
        b.items[-1] = dataclasses.replace(last, breakpoint=True, long=last.long or hour)
        b.one_hour |= hour
    return b.prefix("anthropic", "messages", body.get("model"))


def _schema(b: _Builder, name: str, fmt: Any) -> None:
    """OpenAI renders a structured-output schema ahead of the system message ("a prefix to
    the system message", its caching guide): a changed schema breaks the cache there."""
    if type(fmt) is dict and fmt.get("type") == "json_schema":
        b.add("settings", name, {name: fmt} if name == "response_format" else
              {"text": {"format": fmt}})
        b.items[-1] = dataclasses.replace(b.items[-1], blocks=0)


def _chat(body: Mapping[str, Any]) -> Prefix:
    b = _Builder()
    b.tools(body.get("tools"))
    _schema(b, "response_format", body.get("response_format"))
    leading = True
    for i, msg in enumerate(body.get("messages") or []):
        if type(msg) is not dict:
            b.add("messages", f"messages[{i}]", msg)
            leading = False
            continue
        role = msg.get("role")
        leading = leading and role in ("system", "developer")
        # Explicit breakpoints (gpt-5.6+), or Anthropic's cache_control as OpenAI-compatible
        # gateways (OpenRouter) pass it, in content parts.
        content, m, h = _blocks(msg.get("content"))
        b.add("messages", f"messages[{i}]", {**msg, "content": content}, breakpoint=m,
              system_like=leading, long=h)
    retention = str(body.get("prompt_cache_retention") or "")
    return b.prefix("openai", "chat", body.get("model"), retention=retention, body=body)


def _responses(body: Mapping[str, Any]) -> Prefix:
    b = _Builder()
    b.tools(body.get("tools"))
    text = body.get("text")
    _schema(b, "text.format", text.get("format") if type(text) is dict else None)
    if body.get("instructions"):
        b.add("instructions", "instructions", body["instructions"])
    inp = body.get("input")
    items = [{"role": "user", "content": inp}] if isinstance(inp, str) else inp
    for i, it in enumerate(items if isinstance(items, list) else []):
        marked = long = False
        if type(it) is dict and "role" in it and it.get("type", "message") == "message":
            text_type = "output_text" if it.get("role") == "assistant" else "input_text"
            content, marked, long = _blocks(it.get("content"), text_type)
            it = {**it, "type": "message", "content": content}
        b.add("input", f"input[{i}]", it, breakpoint=marked, long=long)
    retention = str(body.get("prompt_cache_retention") or "")
    return b.prefix("openai", "responses", body.get("model"), retention=retention,
                    stateful=bool(body.get("previous_response_id")), body=body)


def _gemini(body: Mapping[str, Any]) -> Prefix:
    """``generateContent``: the model is in the URL (a loader puts it in ``model``)."""
    b = _Builder()
    system = body.get("systemInstruction") or body.get("system_instruction")
    if isinstance(system, str):
        system = {"parts": [{"text": system}]}
    if isinstance(system, dict):  # a role on the instruction is not read
        b.add("system", "systemInstruction", {"parts": system.get("parts")})
    b.tools(body.get("tools"))
    for i, content in enumerate(body.get("contents") or []):
        b.add("messages", f"contents[{i}]", content)
    return b.prefix("gemini", "gemini", body.get("model"))


_BUILDERS = {"messages": _anthropic, "chat": _chat, "responses": _responses, "gemini": _gemini}


def api_of(provider: str, body: Mapping[str, Any], endpoint: str = "") -> str | None:
    """Which request shape ``body`` is: ``messages``, ``chat``, ``responses``, ``gemini``;
    None if none."""
    if endpoint:
        for suffix, api in ((".messages", "messages"), (".chat.completions", "chat"),
                            (".responses", "responses"), ("gemini.generate_content", "gemini")):
            if endpoint.endswith(suffix):
                return api
        return None
    if provider == "anthropic":
        return "messages"
    if provider == "gemini":
        return "gemini" if "contents" in body else None
    if "messages" in body:
        return "chat"
    if "input" in body or "instructions" in body:
        return "responses"
    return None


def build_prefix(api: str, body: Mapping[str, Any]) -> Prefix:
    """The prefix of a request body of shape ``api`` (see :func:`api_of`)."""
    return _BUILDERS[api](body)


# ---------------------------------------------------------------- comparison


def _key_path(path: str, key: Any) -> str:
    k = str(key)
    return f"{path}.{k}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) else f"{path}[{k!r}]"


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, int, Any, Any] | None:
    """The first place two JSON values differ, in the current request's order:
    (path, character offset inside the differing string, old leaf, new leaf)."""
    if type(a) is dict and type(b) is dict:
        for k in [*b, *(k for k in a if k not in b)]:
            if k not in a or k not in b:
                return _key_path(path, k), 0, a.get(k, _MISSING), b.get(k, _MISSING)
            found = first_difference(a[k], b[k], _key_path(path, k))
            if found is not None:
                return found
        return None
    if type(a) is list and type(b) is list:
        for i in range(max(len(a), len(b))):
            if i >= len(a) or i >= len(b):
                return (f"{path}[{i}]", 0, a[i] if i < len(a) else _MISSING,
                        b[i] if i < len(b) else _MISSING)
            found = first_difference(a[i], b[i], f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if type(a) is str and type(b) is str:
        if a == b:
            return None
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                  min(len(a), len(b)))
        return path, at, a, b
    if a == b and type(a) is type(b):
        return None
    return path, 0, a, b


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


_MISSING = _Missing()
_WORD = re.compile(r"[\w:.+\-/]")  # what a timestamp, id or counter is made of
_GROW = 16  # at most this many unchanged characters added on each side
_MAX = 48


def _clip(text: str) -> str:
    return text if len(text) <= _MAX else text[: _MAX - 1] + "…"


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(absent)"
    if isinstance(value, str):
        return _clip(value)
    import orjson

    try:
        return _clip(orjson.dumps(value).decode())
    except TypeError:
        return _clip(repr(value))


def window(a: Any, b: Any, offset: int) -> tuple[str, str, int]:
    """Short texts of both sides around a difference: the differing run, widened to the
    whole word, time or id it sits in (``12:04:31`` → ``12:05:02``, not ``4:31`` → ``5:02``),
    and where they start."""
    if not (isinstance(a, str) and isinstance(b, str)):
        return _show(a), _show(b), offset
    tail = 0
    while (tail < len(a) - offset and tail < len(b) - offset
           and a[-1 - tail] == b[-1 - tail]):
        tail += 1
    start = offset
    while start > 0 and offset - start < _GROW and _WORD.match(a[start - 1]):
        start -= 1
    end_a, end_b = len(a) - tail, len(b) - tail
    grow = 0
    while end_a < len(a) and grow < _GROW and _WORD.match(a[end_a]):
        end_a, end_b, grow = end_a + 1, end_b + 1, grow + 1
    left, right = a[start:end_a], b[start:end_b]
    # A sentence's full stop is not part of the value.
    while left.endswith((".", ",", ":")) and right.endswith(left[-1]) and len(left) > 1:
        left, right = left[:-1], right[:-1]
    return _clip(left) or "(nothing)", _clip(right) or "(nothing)", start


def _common_bytes(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on slices: C-speed on prompts of a few hundred KB
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _partial(old: Item, new: Item) -> int:
    """Characters (as ``size`` weighs them) of ``new`` that repeat the start of ``old``."""
    common = _common_bytes(old.canonical, new.canonical)
    if not new.images:
        return common
    return round(common * new.size / len(new.canonical))


def _segment_reason(segment: str) -> str:
    return {"tools": "tools", "system": "system", "instructions": "system",
            "settings": "settings"}.get(segment, "modified")


def _parting(prev: Prefix, cur: Prefix) -> tuple[int, tuple[Item, ...], tuple[Item, ...]]:
    """(index of the first item where the comparable items part, those of ``prev``, those of
    ``cur``)."""
    pa, pc = prev.items, cur.items
    if cur.stateful or prev.stateful:
        # Server-side history: only what precedes the input is comparable.
        pa = tuple(i for i in pa if i.segment != "input")
        pc = tuple(i for i in pc if i.segment != "input")
    n = min(len(pa), len(pc))
    i = 0
    pchain = prev.chain
    cchain = cur.chain
    if pa is prev.items and pc is cur.items:
        while i < n and pchain[i] == cchain[i]:
            i += 1
    else:
        while i < n and pa[i].digest == pc[i].digest:
            i += 1
    return i, pa, pc


def shared(prev: Prefix, cur: Prefix) -> tuple[int, bool]:
    """(characters of prefix ``cur`` shares with ``prev``, whether ``cur`` extends or repeats
    ``prev``): what :func:`compare` counts, without describing the difference (the provider
    cache model asks this of every cached prompt)."""
    if prev.model != cur.model:
        return 0, False
    i, pa, pc = _parting(prev, cur)
    if i == len(pa):
        return prev.size, True
    common = sum(x.size for x in pa[:i])
    if i == len(pc):
        return common, False
    old, new = pa[i], pc[i]
    if old.segment != new.segment or (
            old.segment in ("messages", "input") and not (old.system_like and new.system_like)
            and any(x.digest == new.digest for x in pa[i + 1:] if x.segment == old.segment)):
        return common, False
    return common + _partial(old, new), False


def compare(prev: Prefix, cur: Prefix) -> Difference | None:
    """Where ``cur`` stops continuing ``prev``'s prefix, or None when it extends (or repeats)
    it. A conversation growing by new messages at the end is not a difference."""
    if prev.model != cur.model:
        return Difference("model", "model", "model", 0, prev.model or "(none)",
                          cur.model or "(none)", 0)
    i, pa, pc = _parting(prev, cur)
    if i == len(pa):
        return None
    common = sum(x.size for x in pa[:i])
    old = pa[i]
    if i == len(pc):  # the new request stops inside the old prefix: history was cut
        return Difference("truncated", old.segment, old.path, 0, _show(old.data), "(end)",
                          common)
    new = pc[i]
    order = ORDER[cur.api]
    if old.segment != new.segment:
        # An item added or removed at a segment's end shifts the next segment up.
        first = min(old.segment, new.segment,
                    key=lambda s: order.index(s) if s in order else len(order))
        reason = _segment_reason(first)
        if first == old.segment:
            return Difference(reason, first, old.path, 0, _show(old.data), "(removed)",
                              common)
        return Difference(reason, first, new.path, 0, "(absent)", _show(new.data), common)
    if old.segment in ("messages", "input"):
        if old.system_like and new.system_like:
            reason = "system"
        elif any(x.digest == new.digest for x in pa[i + 1:] if x.segment == old.segment):
            reason = "truncated"  # earlier messages dropped: the next one moved up
        else:
            reason = "modified"
    else:
        reason = _segment_reason(old.segment)
    if reason == "truncated":
        return Difference(reason, old.segment, old.path, 0, _show(old.data), _show(new.data),
                          common)
    common += _partial(old, new)
    found = first_difference(old.data, new.data)
    if found is None:  # equal data, different digest: cannot happen; keep a clear answer
        return Difference(reason, old.segment, old.path, 0, "", "", common)
    leaf, offset, a, b = found
    before, after, start = window(a, b, offset)
    span = span_at(a, offset) if isinstance(a, str) else None
    if span is not None:
        # A change inside a value that looks volatile (the minutes of a timestamp) is named
        # as that value, where it starts: where the first turn's hazard named it.
        if span[0] < start:
            head = a[span[0]:start]
            before, after = _clip(head + before), _clip(head + after)
        offset = span[0]
    # A setting is named as the request's field (``tool_choice.name``), not as an item.
    path = leaf.lstrip(".") if old.segment == "settings" else old.path + leaf
    return Difference(reason, old.segment, path, offset, before, after, common)
