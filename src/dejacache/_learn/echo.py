"""What a run's requests quote of its own earlier answers: never volatile.

Two live runs get different answers (the model's text, the ids it returns, a tool's
result), and an agent sends them back in its next request. Those differences replay by
themselves (a replay hands back the recorded answer, which the next request then quotes),
so they must not become rules. :class:`Echoes` learns, call by call, which strings of the
second run's answers stand where the first run's stood, and translates the second run's
later requests into the first run's words before they are compared: what is left differs
for another reason. Ids the recorder aliases (``<id:3>``) are equal already.

A value both runs were told and chose differently is no translation's business: the model
said Paris in one run and Rome in the other, and the tool call that followed asked for the
weather there (too short to translate, or said the same in both runs' answers: a list of
users, one picked). :meth:`Echoes.quoted` tells such a value by its words: each run's value
is made of words that run's earlier answers held. Masked, it would give the weather in
Paris and in Rome one key, in every store; unmasked, a replay asks what its recorded answer
says, as the run did.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Final

from .._core.shapes import spans

__all__ = ["Echoes"]

# A string this short is a word, not something quoted: translating it would rewrite text
# that merely happens to contain it.
MIN_ECHO: Final = 6
_WORD: Final = re.compile(r"\w+")
# An answer's headers say when and by whom it was served (Date, request ids), not what:
# a request sent in the same second as an earlier answer's Date would read as quoting it.
_NOT_SAID: Final = frozenset({"headers"})
_EVENT_DATA: Final = "data:"


def _event_json(text: str) -> Any:
    """The JSON of one SSE event's ``data:`` lines (None: not JSON)."""
    import orjson

    lines = [ln[len(_EVENT_DATA):].lstrip() for ln in text.splitlines()
             if ln.startswith(_EVENT_DATA)]
    if not lines:
        return None
    try:
        return orjson.loads("\n".join(lines))
    except orjson.JSONDecodeError:
        return None


def _stream(events: list[Any]) -> tuple[list[Any], str]:
    """A recorded stream's events as JSON, and the text its deltas add up to."""
    parsed: list[Any] = []
    text: list[str] = []
    for ev in events:
        body = ev[1] if isinstance(ev, list) and len(ev) == 2 else ev
        data = _event_json(body) if isinstance(body, str) else body
        parsed.append(data)
        _delta_text(data, text)
    return parsed, "".join(text)


_DELTA_KEYS: Final = frozenset({"content", "text", "delta", "arguments", "partial_json",
                                "thinking", "refusal"})


def _delta_text(node: Any, out: list[str]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(v, str) and k in _DELTA_KEYS:
                out.append(v)
            else:
                _delta_text(v, out)
    elif isinstance(node, list):
        for v in node:
            _delta_text(v, out)


def _words(node: Any, out: set[str]) -> None:
    t = type(node)
    if t is str:
        out.update(_WORD.findall(node))
    elif t is dict:
        for k, v in node.items():
            if k not in _NOT_SAID:
                _words(v, out)
    elif t is list:
        for v in node:
            _words(v, out)
    elif t is int or t is float:
        out.add(str(node))


def _said(value: Any, said: set[str]) -> bool:
    t = type(value)
    if t is not str and t is not int and t is not float:
        return False
    words = _WORD.findall(str(value))
    return bool(words) and all(w in said for w in words)


class Echoes:
    """Strings of the second run's answers, mapped to the first run's."""

    def __init__(self) -> None:
        self._whole: dict[str, str] = {}
        self._parts: dict[str, str] = {}  # in the order learned
        self._keys: list[str] = []  # self._parts' keys, in that order
        self._by_head: dict[str, list[str]] = {}  # the parts by their first MIN_ECHO chars
        self._rank: dict[str, int] = {}  # a part's place in self._keys
        # string -> (parts known when it was translated, its translation, strings replaced)
        self._done: dict[str, tuple[int, str, int]] = {}
        self._said: tuple[set[str], set[str]] = (set(), set())  # each run's answers' words
        self.used = 0  #: strings translated so far

    def learn(self, answer_a: Any, answer_b: Any) -> None:
        """One call's answers, from the first and the second run."""
        self._pair(answer_a, answer_b)
        _words(answer_a, self._said[0])
        _words(answer_b, self._said[1])

    def quoted(self, a: Any, b: Any) -> bool:
        """Whether each of two differing values (``a`` of the first run, ``b`` of the
        second) is made of words its own run's earlier answers held."""
        return all(_said(v, said) for v, said in zip((a, b), self._said, strict=True))

    def _pair(self, a: Any, b: Any) -> None:
        if type(a) is dict and type(b) is dict:
            for k in a.keys() & b.keys():
                if k == "events" and isinstance(a[k], list) and isinstance(b[k], list):
                    (pa, ta), (pb, tb) = _stream(a[k]), _stream(b[k])
                    self._strings(ta, tb)
                    if len(pa) == len(pb):
                        self._pair(pa, pb)
                else:
                    self._pair(a[k], b[k])
        elif type(a) is list and type(b) is list:
            for x, y in zip(a, b, strict=False):
                self._pair(x, y)
            if len(a) != len(b) and all(isinstance(v, str) for v in (*a, *b)):
                self._strings(" ".join(a), " ".join(b))
        elif type(a) is str and type(b) is str and a != b:
            self._strings(a, b)

    def _strings(self, a: str, b: str) -> None:
        if a == b:
            return
        if len(b) >= 2:  # a whole answer quoted as a whole value (any length)
            self._whole.setdefault(b, a)
        if len(b) >= MIN_ECHO and a.strip() and b.strip():
            self._add_part(b, a)
        for s in spans(a, b):
            if len(s.b_text) >= MIN_ECHO:
                self._add_part(s.b_text, s.a_text)

    def _add_part(self, b: str, a: str) -> None:
        if b not in self._parts:
            self._parts[b] = a
            self._rank[b] = len(self._keys)
            self._keys.append(b)
            self._by_head.setdefault(b[:MIN_ECHO], []).append(b)

    def translate(self, tree: Any, like: Any = None) -> Any:
        """``tree`` (a second-run request) with the answers it quotes in first-run words;
        ``like``: the first run's request, whose equal strings are left as they are (an
        answer's word that happens to be in both requests, ``"yes"``, would otherwise
        read as the other run's answer there, and that difference become a rule)."""
        if not self._whole and not self._parts:
            return tree
        return self._tr(tree, like)

    def _tr(self, tree: Any, like: Any) -> Any:
        t = type(tree)
        if t is str:
            return tree if tree == like else self._text(tree)
        if t is dict:
            pairs: dict[Any, Any] = like if type(like) is dict else {}
            return {k: self._tr(v, pairs.get(k)) for k, v in tree.items()}
        if t is list:
            items: list[Any] = like if type(like) is list else []
            return [self._tr(v, items[i] if i < len(items) else None)
                    for i, v in enumerate(tree)]
        return tree

    def _text(self, s: str) -> str:
        whole = self._whole.get(s)
        if whole is not None:
            self.used += 1
            return whole
        if not self._keys:
            return s
        out, n = self._parts_in(s)
        self.used += n
        return out

    def _parts_in(self, s: str) -> tuple[str, int]:
        """``s`` with the parts it holds translated, and how many. One pattern of every part
        was compiled again after each call (a part or more each): 1,000 calls of a cassette
        took 150 s, nearly all in ``re.compile``. Only the parts ``s`` holds can match, so the
        pattern is made of those; and a string seen before (an agent sends its history
        again with every turn) is looked at only for the parts learned since."""
        known = len(self._keys)
        done = self._done.get(s)
        if done is not None and (done[0] == known or not any(
                p in s for p in self._keys[done[0]:])):
            self._done[s] = (known, done[1], done[2])
            return done[1], done[2]
        found = self._held(s)
        out, n = (s, 0) if not found else _pattern(found).subn(
            lambda m: self._parts[m.group()], s)
        self._done[s] = (known, out, n)
        return out, n


    def _held(self, s: str) -> tuple[str, ...]:
        """The parts ``s`` holds, in the order learned: each part looked for, or, when ``s``
        is the shorter, the parts starting at each of its places (10,000 calls: 35 s
        looking for every part in every new string)."""
        if len(self._keys) <= len(s):
            return tuple(p for p in self._keys if p in s)
        heads = {s[i:i + MIN_ECHO] for i in range(len(s) - MIN_ECHO + 1)}
        found = {p for h in heads for p in self._by_head.get(h, ()) if p in s}
        return tuple(sorted(found, key=self._rank.__getitem__))


@functools.lru_cache(maxsize=256)
def _pattern(parts: tuple[str, ...]) -> re.Pattern[str]:
    # Longest first: a whole message before a nonce in it (a stable sort keeps the order
    # learned among parts of one length, as one pattern of them all did).
    return re.compile("|".join(map(re.escape, sorted(parts, key=len, reverse=True))))
