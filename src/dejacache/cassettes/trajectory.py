"""Recordings as data: a read-only view of a cassette (:func:`load_cassette`), a structured
diff of two (:func:`diff_cassettes`), and the records of a block's own calls (``tape.calls``,
``tape.divergences``).

Everything that reads a whole cassette for people (``dejacache show``, ``dejacache diff``,
the HTML report) is built on these, so they agree on what a step, a token and a change is.

* **Steps** are the recorded calls in the order they were made (file order; within
  concurrent tasks, each step's ``follows`` names the step its task made before it).
* **kind**: ``"model"`` for LLM provider endpoints (and ``@cache(kind="llm"|"model")``),
  ``"tool"`` for ``@cache(kind="tool")`` and MCP ``tools/call``, ``"http"`` for other HTTP
  endpoints, and ``"function"`` for every other ``@cache`` function (and MCP request).
* **Tokens** come from the usage the provider reported (``tokens_exact``); a model step
  without usage (a stream that did not ask for it) is estimated at ~4 characters per token
  of its request and of its answer's text. A tool or function step without usage is
  estimated at what its result adds to the conversation (``output_tokens``; a 432-character
  result is ~108 tokens), which the totals leave to the model call that reads it
  (``Step.counted``); one that returned a provider's usage counts that, exactly.
* **Cost** uses the dated price table of :mod:`dejacache.cassettes.prices`.
* Requests are the stored, redacted ones: the view never holds a secret the file does not.
  Requests and responses are expanded from the file's shared values when read (an agent's
  expanded requests grow quadratically with its length; the view stays linear).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import orjson

from .._core.diff import field_diff
from ..errors import CassetteError
from . import format as fmt
from .blob_audit import BlobInfo, describe, hints_in
from .blobs import Folder, blobs_in
from .calls import Call, args_of
from .document import load_document, verify_document
from .findings import CallInfo, Divergence
from .kinds import step_kind
from .prices import PRICES_DATE, estimate_dollars

__all__ = [
    "Call",
    "CallInfo",
    "CassetteDiff",
    "CassetteView",
    "ChangedCall",
    "Divergence",
    "Step",
    "ToolCall",
    "diff_cassettes",
    "load_cassette",
    "step_kind",
    "usage_tokens",
]

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text and JSON


def usage_tokens(usage: Any) -> tuple[int, int] | None:
    """``(input, output)`` tokens of a usage block (OpenAI chat/responses, Anthropic), or None.

    Input counts the whole prompt: Anthropic reports cache reads and writes apart from
    ``input_tokens``; OpenAI's ``prompt_tokens`` already includes its cached tokens.
    """
    if not isinstance(usage, dict):
        return None
    def num(field: str) -> int:
        v = usage.get(field, 0)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return num("prompt_tokens"), num("completion_tokens")
    if "input_tokens" in usage or "output_tokens" in usage:
        tin = (num("input_tokens") + num("cache_read_input_tokens")
               + num("cache_creation_input_tokens"))
        return tin, num("output_tokens")
    return None


# ---------------------------------------------------------------- small records


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call a model asked for in its response (``Step.tool_calls``)."""

    name: str
    arguments: Any
    id: str = ""


# ---------------------------------------------------------------- the view


class Step:
    """One recorded call of a cassette (read-only). See the module docstring."""

    __slots__ = ("_entry", "_view", "cost", "duration", "follows", "index", "input_tokens",
                 "key", "kind", "model", "name", "namespace", "occurrence", "output_tokens",
                 "raw_kind", "tokens_exact", "usage")

    outcome: str | None = None  # a file does not say whether a run replayed or recorded it

    def __init__(self, view: CassetteView, index: int, entry: dict[str, Any]) -> None:
        self._view = view
        self._entry = entry
        self.index = index
        self.name = str(entry.get("name", ""))
        self.raw_kind = str(entry.get("kind", "call"))
        self.kind = step_kind(self.raw_kind, self.name)
        self.key = str(entry.get("key", ""))
        self.namespace = str(entry.get("namespace", ""))
        occ = entry.get("occurrence", 0)
        self.occurrence = occ if isinstance(occ, int) else 0
        f = entry.get("follows")
        self.follows: int | None = f if isinstance(f, int) and -1 <= f < index else None
        d = entry.get("duration", 0.0)
        self.duration = float(d) if isinstance(d, (int, float)) else 0.0
        usage = entry.get("usage")
        self.usage: dict[str, Any] | None = usage if isinstance(usage, dict) else None
        self.model = ""
        tokens = usage_tokens(self.usage)
        if self.raw_kind == "ws" and tokens is None:
            tokens = (0, 0)  # a session's message bills nothing apart: its answer's usage does
        if self.kind != "model" and tokens is not None:  # a wrapped model call's usage
            self.input_tokens, self.output_tokens = tokens
            self.tokens_exact = True
        elif self.kind != "model":
            # What its result adds to the conversation, estimated (~4 characters a token):
            # the next model call reads it. Not counted in the totals (that call counts it
            # as its input); its arguments were the model's output.
            self.input_tokens = 0
            self.output_tokens = -(-view._answer_size(entry.get("response")) // CHARS_PER_TOKEN)
            self.tokens_exact = False
        elif tokens is not None:
            self.input_tokens, self.output_tokens = tokens
            self.tokens_exact = True
        else:
            req, resp = entry.get("request"), entry.get("response")
            body = req.get("body") if isinstance(req, dict) else req
            self.input_tokens = -(-view._size(body) // CHARS_PER_TOKEN)
            self.output_tokens = -(-view._answer_size(resp) // CHARS_PER_TOKEN)
            self.tokens_exact = False
        if self.kind == "model":
            self.model = view._model(entry)
        self.cost = estimate_dollars(self._priced(), self.model) if self.model else 0.0

    def _priced(self) -> dict[str, int]:
        """The counts to price: the provider's own usage when it gave the tokens (its audio,
        cached and cache-written parts are priced apart), else the estimate."""
        if self.tokens_exact and self.usage is not None:
            return {k: v for k, v in self.usage.items() if type(v) is int}
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def counted(self) -> bool:
        """Whether the totals count this step's tokens: a model call, or a step that
        returned a provider's usage (a tool's estimate is counted by the call that reads
        its result)."""
        return self.kind == "model" or self.usage is not None

    @property
    def request(self) -> Any:
        """The request as stored (credentials redacted), shared values expanded."""
        return self._view._expand(self._entry.get("request"))

    @property
    def args(self) -> Any:
        """A function's arguments, a model call's request body."""
        return args_of(self.kind, self.request)

    @property
    def response(self) -> Any:
        """The recorded answer (None for a step that recorded an exception)."""
        if "error" in self._entry:
            return None
        return self._view._expand(self._entry.get("response"))

    @property
    def error(self) -> dict[str, Any] | None:
        """``{"type", "message", "args"}`` of a recorded exception, else None."""
        err = self._entry.get("error")
        return err if isinstance(err, dict) else None

    @property
    def stored(self) -> dict[str, Any]:
        """The entry exactly as the file holds it (value references unexpanded)."""
        return dict(self._entry)

    @property
    def tool_calls(self) -> list[ToolCall]:
        """Tools the model asked for in this (non-streamed) response: OpenAI chat
        completions and responses, Anthropic messages."""
        return _tool_calls(self.response) if self.kind == "model" else []

    def info(self) -> CallInfo:
        return CallInfo(self.name, self.kind, self.key, self.request, self.index)

    def __repr__(self) -> str:
        return f"Step(#{self.index} {self.kind} {self.name!r})"


class CassetteView:
    """A cassette file, read-only (:func:`load_cassette`)."""

    def __init__(self, path: pathlib.Path, doc: dict[str, Any], *, verified: bool) -> None:
        self.path = path
        self._doc = doc
        self._values: dict[str, Any] = doc.get("values", {})
        self._sizes: dict[str, int] = {}
        self._verified = verified
        self._blobs: list[BlobInfo] | None = None
        self.format = doc.get("format")
        self.steps: tuple[Step, ...] = tuple(
            Step(self, i, e) for i, e in enumerate(doc["entries"]))

    # totals -----------------------------------------------------------
    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def total_input_tokens(self) -> int:
        return sum(s.input_tokens for s in self.steps if s.counted)

    @property
    def total_output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.steps if s.counted)

    @property
    def total_tokens(self) -> int:
        return self.total_input_tokens + self.total_output_tokens

    @property
    def tokens_exact(self) -> bool:
        """Every model step's tokens are the provider's reported usage (steps that cost no
        tokens, such as tools, do not make the totals estimates)."""
        return all(s.tokens_exact for s in self.steps if s.kind == "model" or s.usage)

    @property
    def duration(self) -> float:
        """Seconds the recorded calls took (as recorded; replay costs none of it)."""
        return sum(s.duration for s in self.steps)

    @property
    def cost(self) -> float:
        """Dollars the recorded model calls cost at :data:`prices_date` prices."""
        return sum(s.cost for s in self.steps)

    prices_date = PRICES_DATE

    @property
    def num_values(self) -> int:
        return len(self._values)

    @property
    def blobs(self) -> list[BlobInfo]:
        """The payloads the file keeps in the ``blobs`` folder beside it, largest first:
        hash, bytes, media type (sniffed, or what the entry says beside it) and the steps
        that use each (a missing blob has size -1). Steps show them as ``@ref:blob:<hash>``."""
        if self._blobs is None:
            steps: dict[str, list[int]] = {}
            hints: dict[str, str] = {}
            for s in self.steps:
                found: set[str] = set()
                for part in (s._entry.get("request"), s._entry.get("response")):
                    tree = self._expand(part)  # markers inside shared values too
                    blobs_in(tree, found)
                    hints_in(tree, hints)
                for h in found:
                    steps.setdefault(h, []).append(s.index)
            self._blobs = describe(Folder.beside(self.path), steps, hints, steps)
        return self._blobs

    @property
    def problem(self) -> str | None:
        """Why replay would refuse this file (a checksum or hash mismatch), or None."""
        if self._verified:
            return None
        try:
            verify_document(self._doc, self.path)
        except CassetteError as exc:
            return str(exc)
        return None

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __repr__(self) -> str:
        return f"CassetteView({str(self.path)!r}, {self.num_steps} steps)"

    # internals --------------------------------------------------------
    def _resolve(self, h: str) -> Any:
        # A reference missing from a damaged file stays visible as itself.
        return self._values.get(h, fmt.REF + h)

    def _expand(self, tree: Any) -> Any:
        return fmt.unpack(tree, self._resolve)

    def _size(self, tree: Any) -> int:
        """The JSON length of ``tree`` expanded, in linear time (shared values measured
        once): what a token estimate needs without expanding quadratic histories."""
        t = type(tree)
        if t is str:
            if tree.startswith(fmt.REF):
                h = tree[len(fmt.REF):]
                n = self._sizes.get(h)
                if n is None:
                    v = self._values.get(h)
                    n = len(v) + 2 if type(v) is str else self._size(v)
                    self._sizes[h] = n
                return n
            return len(tree) + 2
        if t is dict:
            return 2 + sum(len(k) + 4 + self._size(v) for k, v in tree.items())
        if t is list:
            return 2 + sum(self._size(v) + 1 for v in tree)
        return len(orjson.dumps(tree)) if tree is not None else 4

    def _answer_size(self, resp: Any) -> int:
        """Characters of the answer a model call produced: a stream's generated text, not
        its SSE framing (each OpenAI chunk repeats id, model, fingerprint and choice
        scaffolding around a few characters: sizing the events made a 62-character answer
        948 tokens), else the stored body's JSON length."""
        if isinstance(resp, dict) and "events" in resp:
            return _stream_text_size(self._expand(resp["events"]))
        out = _answer_part(resp)
        return self._size(out) if out is not None else 0

    def _model(self, entry: dict[str, Any]) -> str:
        resp = entry.get("response")
        for part in (resp, resp.get("json") if isinstance(resp, dict) else None,
                     resp.get("body") if isinstance(resp, dict) else None):
            part = self._expand_one(part)
            if isinstance(part, dict) and isinstance(part.get("model"), str):
                return str(part["model"])
        req = entry.get("request")
        body = self._expand_one(req.get("body") if isinstance(req, dict) else None)
        if isinstance(body, dict) and isinstance(body.get("model"), str):
            return str(body["model"])
        return ""

    def _expand_one(self, node: Any) -> Any:
        # One level is enough to read a "model" field: its value is a short string.
        if type(node) is str and node.startswith(fmt.REF):
            return self._values.get(node[len(fmt.REF):])
        return node


def _event_data(text: str) -> Any:
    # The SSE parser, loaded by the views that read streams: a cassette block only needs
    # this module's call records.
    from ..http.sse import event_data

    return event_data(text)


def _answer_part(resp: Any) -> Any:
    if not isinstance(resp, dict):
        return resp
    for field in ("json", "body", "events"):
        if field in resp:
            return resp[field]
    return resp


def _stream_text_size(events: Any) -> int:
    """Characters generated in a recorded stream's events: text, refusals, reasoning and
    tool-call argument deltas of OpenAI chat chunks, Responses API ``*.delta`` events and
    Anthropic ``content_block_delta`` events."""
    total = 0
    for event in events if isinstance(events, list) else ():
        text = event[1] if isinstance(event, list) and len(event) == 2 else event
        data = _event_data(text) if isinstance(text, str) else None
        if isinstance(data, dict):
            total += _delta_size(data)
    return total


def _delta_size(data: dict[str, Any]) -> int:
    delta = data.get("delta")
    if isinstance(delta, str):  # OpenAI Responses: response.output_text.delta and kin
        return len(delta)
    if isinstance(delta, dict):  # Anthropic: text, thinking, partial_json
        return sum(len(v) for k, v in delta.items()
                   if k in ("text", "thinking", "partial_json") and isinstance(v, str))
    n = 0
    for choice in data.get("choices") or ():  # OpenAI chat completion chunks
        d = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(d, dict):
            continue
        n += sum(len(v) for k, v in d.items()
                 if k in ("content", "refusal", "reasoning_content") and isinstance(v, str))
        for tc in d.get("tool_calls") or ():
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict):
                n += sum(len(v) for v in (fn.get("name"), fn.get("arguments"))
                         if isinstance(v, str))
    return n


def load_cassette(path: str | os.PathLike[str], *, verify: bool = True) -> CassetteView:
    """A read-only view of the cassette at ``path`` (see the module docstring).

    With ``verify`` (the default) a file that fails its checksums raises
    :class:`~dejacache.CassetteError`, as replay would; ``verify=False`` shows it anyway
    (``view.problem`` says what is wrong), which is how ``dejacache show`` finds an edit.
    """
    p = pathlib.Path(path)
    data = fmt.read_file(p)
    if data is None:
        raise CassetteError("no such file", path=p)
    doc = load_document(data, p, verify=verify)
    return CassetteView(p, doc, verified=verify)


def _tool_calls(resp: Any) -> list[ToolCall]:
    body = _answer_part(resp)
    if not isinstance(body, dict):
        return []
    out: list[ToolCall] = []
    for choice in body.get("choices") or ():  # OpenAI chat completions
        msg = choice.get("message") if isinstance(choice, dict) else None
        for tc in (msg or {}).get("tool_calls") or ():
            fn = tc.get("function") or {}
            out.append(ToolCall(str(fn.get("name", "")), _json_args(fn.get("arguments")),
                                str(tc.get("id", ""))))
    for item in body.get("output") or ():  # OpenAI responses
        if isinstance(item, dict) and item.get("type") == "function_call":
            out.append(ToolCall(str(item.get("name", "")), _json_args(item.get("arguments")),
                                str(item.get("call_id", ""))))
    content = body.get("content")
    for block in content if isinstance(content, list) else ():  # Anthropic messages
        if isinstance(block, dict) and block.get("type") == "tool_use":
            out.append(ToolCall(str(block.get("name", "")), block.get("input"),
                                str(block.get("id", ""))))
    return out


def _json_args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


# ---------------------------------------------------------------- diff


@dataclasses.dataclass(frozen=True, slots=True)
class ChangedCall:
    """A call made in both recordings whose request, response or error differ."""

    before: Step
    after: Step
    changes: tuple[str, ...]  # "request.messages[2].content: 'a' -> 'b'", ...

    @property
    def name(self) -> str:
        return self.after.name

    @property
    def request_changed(self) -> bool:
        return any(c.startswith("request.") for c in self.changes)


@dataclasses.dataclass(frozen=True, slots=True)
class CassetteDiff:
    """What changed from recording ``a`` to recording ``b`` (:func:`diff_cassettes`)."""

    a: CassetteView
    b: CassetteView
    new_calls: tuple[Step, ...]  # in b only (b's order)
    dropped_calls: tuple[Step, ...]  # in a only (a's order)
    changed_calls: tuple[ChangedCall, ...]  # in both, different (b's order)
    reordered_calls: tuple[tuple[Step, Step], ...]  # same call, after another step of its task
    unchanged: int

    @property
    def step_delta(self) -> int:
        return self.b.num_steps - self.a.num_steps

    @property
    def token_delta(self) -> int:
        return self.b.total_tokens - self.a.total_tokens

    @property
    def cost_delta(self) -> float:
        return self.b.cost - self.a.cost

    @property
    def duration_delta(self) -> float:
        return self.b.duration - self.a.duration

    @property
    def identical(self) -> bool:
        """Same calls, same answers, same order within each task (durations and the ids
        providers regenerate on every recording aside)."""
        return not (self.new_calls or self.dropped_calls or self.changed_calls
                    or self.reordered_calls)


# Response fields a provider fills anew on every call: not a change of behaviour.
_VOLATILE_BODY = frozenset({"created", "created_at", "system_fingerprint"})


class _Normaliser:
    """Provider-generated ids of one recording renamed ``<id:n>`` by first appearance (the
    requests' keys alias them the same way, http/aliases.py), so a re-recording that got
    fresh ids from the provider compares equal."""

    def __init__(self, view: CassetteView) -> None:
        self.map: dict[str, str] = {}
        for s in view.steps:
            resp = s._entry.get("response")
            ids = resp.get("ids") if isinstance(resp, dict) else None
            for i in view._expand(ids) or ():
                if isinstance(i, str) and i not in self.map:
                    self.map[i] = f"<id:{len(self.map) + 1}>"

    def response(self, step: Step) -> Any:
        resp = step.response
        if isinstance(resp, dict) and ("status" in resp or "ids" in resp):  # an HTTP answer
            resp = {k: v for k, v in resp.items() if k not in ("headers", "ids", "alias")}
            for field in ("json", "body"):
                body = resp.get(field)
                if isinstance(body, dict):
                    resp[field] = {k: v for k, v in body.items() if k not in _VOLATILE_BODY}
            events = resp.get("events")
            if isinstance(events, list):
                # A stream: the events' timing changes on every recording, and each event's
                # JSON repeats the ids and timestamps; compare what the events say.
                resp["events"] = [self._event(e) for e in events]
        return self._alias(resp)

    @staticmethod
    def _event(event: Any) -> Any:
        text = event[1] if isinstance(event, list) and len(event) == 2 else event
        if not isinstance(text, str):
            return text
        data = _event_data(text)
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in _VOLATILE_BODY}
        return data if data is not None else text.strip()

    def _alias(self, node: Any) -> Any:
        if not self.map:
            return node
        t = type(node)
        if t is str:
            return self.map.get(node, node)
        if t is dict:
            return {k: self._alias(v) for k, v in node.items()}
        if t is list:
            return [self._alias(v) for v in node]
        return node


class _Plain(_Normaliser):
    def __init__(self, view: CassetteView) -> None:
        self.map = {}

    def response(self, step: Step) -> Any:
        return step.response


def diff_cassettes(a: str | os.PathLike[str] | CassetteView,
                   b: str | os.PathLike[str] | CassetteView, *,
                   ignore_ids: bool = True, limit: int = 200) -> CassetteDiff:
    """Compare two recordings of the same test (``a`` before, ``b`` after).

    Steps are paired first by identical request (same key, n-th occurrence with n-th), then,
    among the rest, by name in order (a changed argument is a *changed* call; a different
    tool is one dropped and one new call). ``ignore_ids`` (default) ignores the ids, response
    headers and timestamps providers regenerate on every call. ``limit``: field changes kept
    per call.
    """
    va = a if isinstance(a, CassetteView) else load_cassette(a, verify=False)
    vb = b if isinstance(b, CassetteView) else load_cassette(b, verify=False)
    norm_a, norm_b = (_Normaliser(va), _Normaliser(vb)) if ignore_ids else (_Plain(va),
                                                                              _Plain(vb))
    pairs: dict[int, int] = {}  # a index -> b index
    by_key: dict[tuple[str, int], int] = {}
    seen: collections.Counter[str] = collections.Counter()
    for s in va.steps:
        by_key[(s.key, seen[s.key])] = s.index
        seen[s.key] += 1
    seen.clear()
    for s in vb.steps:
        hit = by_key.get((s.key, seen[s.key]))
        seen[s.key] += 1
        if hit is not None:
            pairs[hit] = s.index
    rest_a = [s for s in va.steps if s.index not in pairs]
    paired_b = set(pairs.values())
    rest_b = [s for s in vb.steps if s.index not in paired_b]
    import difflib  # ~1.5 ms with heapq: only here, not with the first block

    sm = difflib.SequenceMatcher(a=[s.name for s in rest_a], b=[s.name for s in rest_b],
                                 autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            for x, y in zip(rest_a[i1:i2], rest_b[j1:j2], strict=True):
                pairs[x.index] = y.index
    paired_b = set(pairs.values())
    changed: list[ChangedCall] = []
    unchanged = 0
    for ia, ib in sorted(pairs.items(), key=lambda p: p[1]):
        sa, sb = va.steps[ia], vb.steps[ib]
        lines = _changes(sa, sb, norm_a, norm_b, limit)
        if lines:
            changed.append(ChangedCall(sa, sb, tuple(lines)))
        else:
            unchanged += 1
    reordered = []
    for ia, ib in sorted(pairs.items(), key=lambda p: p[1]):
        fa, fb = va.steps[ia].follows, vb.steps[ib].follows
        if fa is None or fb is None:
            continue  # a file written before the order was kept
        mapped = -1 if fa == -1 else pairs.get(fa)
        if mapped != fb:
            reordered.append((va.steps[ia], vb.steps[ib]))
    return CassetteDiff(
        a=va, b=vb,
        new_calls=tuple(s for s in vb.steps if s.index not in paired_b),
        dropped_calls=tuple(s for s in va.steps if s.index not in pairs),
        changed_calls=tuple(changed), reordered_calls=tuple(reordered), unchanged=unchanged)


def _changes(sa: Step, sb: Step, na: _Normaliser, nb: _Normaliser, limit: int) -> list[str]:
    lines: list[str] = []
    if sa.key != sb.key or sa._entry.get("request") != sb._entry.get("request"):
        lines += [f"request.{d}" for d in field_diff(sa.request, sb.request, limit=limit)]
    if "error" in sa._entry or "error" in sb._entry:
        lines += [f"error.{d}" for d in field_diff(sa.error, sb.error, limit=limit)]
    if sa.error is None or sb.error is None:
        ra, rb = na.response(sa), nb.response(sb)
        lines += [f"response.{d}" for d in field_diff(ra, rb, limit=limit)]
    return lines[:limit]
