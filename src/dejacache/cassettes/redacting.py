"""The write path of a :class:`~.redact.Redactor`: a tree rewritten so that no listed secret
reaches a cassette file.

Credential names anywhere (dict keys, ``[name, value]`` pairs), the password of basic
credentials under an ``auth``-like name (``_secrets.basic_auth``), query parameters inside
``params``/``query`` dicts, dotted paths, the user's regexes, ``substitute`` values and every
secret-shaped string or keyed mask (``_secrets.mask_text``). Apart from ``redact.py``: a
replay hit only restores ``substitute`` values, so this is loaded with the first tree a block
writes (a recording, a miss report): 7 KB of bytecode a replay-only block never reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _secrets
from .._secrets import PLACEHOLDER

if TYPE_CHECKING:
    from collections.abc import Callable

    from .redact import Redactor

__all__ = ["Writing"]

# Dicts whose members are URL query parameters (``secret_query`` applies to their names).
_QUERY_HOLDERS = frozenset({"params", "query", "query_params", "querystring"})
_MEMO_MAX = 8192


class Writing:
    """What :meth:`Redactor.tree` and :meth:`Redactor.text` do, for one redactor (which
    decides the names); each distinct string is scanned once (agents resend the same
    messages every step)."""

    __slots__ = ("_memo", "_names", "redactor")

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._memo: dict[str, str] = {}
        # What each field name may hold, by (name, response, in a query): a recorded 2 KB
        # call's tree has ~64 fields of a few distinct names, each judged through the
        # redactor's name forms every time (and two closures built per dict): 26% of
        # recording an @cache call, ~8% with this.
        self._names: dict[tuple[Any, bool, bool], tuple[int, bool]] = {}

    def tree(self, tree: Any, response: bool) -> Any:
        for path in self.redactor.paths:
            tree = _drop_path(tree, path)
        return self._walk(tree, False, response, None)

    def text(self, s: str) -> str:
        done = self._memo.get(s)
        if done is not None:
            return done
        orig = s
        r = self.redactor
        for placeholder, live in r.substitute:
            if live in s:
                s = s.replace(live, placeholder)
        for pat in r.patterns:
            s = pat.sub(PLACEHOLDER, s)
        if _secrets.MASK_PREFIX in s:  # canonical requests carry keyed masks: machine-specific
            s = _secrets.MASK_RE.sub(PLACEHOLDER, s)
        s = _secrets.mask_text(s, _secrets.placeholder, r.secret_query)
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[orig] = s
        return s

    def _walk(self, node: Any, in_query: bool, response: bool, parent: str | None) -> Any:
        """``parent``: the field ``node`` is held under (None: a list item or the whole tree),
        which says whether a list of two is a ``[name, value]`` pair."""
        t = type(node)
        if t is str:
            return self.text(node)
        if t is dict:
            return self._dict(node, in_query, response)
        if t is not list:
            return node
        kind = _secrets.pair_kind(node, self._secret(in_query, response), parent)
        if kind:
            return [node[0], _secrets.held(kind, node[1], _secrets.placeholder,
                                           self._walker(response))]
        return [self._walk(v, in_query, response, None) for v in node]

    def _dict(self, node: dict[Any, Any], in_query: bool, response: bool) -> dict[Any, Any]:
        names = self._names
        out = {}
        for k, v in node.items():
            judged = names.get((k, response, in_query))
            if judged is None:
                judged = self._judge(k, in_query, response)
            kind, query = judged
            if kind and v is not None:
                kind = _secrets.value_kind(kind, v)
                if kind:
                    out[k] = _secrets.held(kind, v, _secrets.placeholder, self._walker(response))
                    continue
            out[k] = self._walk(v, query, response, k)
        return out

    def _judge(self, name: Any, in_query: bool, response: bool) -> tuple[int, bool]:
        """What ``name`` may hold (``_secrets.name_kind``: remembered by name, never the
        value's kind) and whether its members are query parameters."""
        judged = (_secrets.name_kind(name, self._secret(in_query, response)),
                  _secrets.normalize(name) in _QUERY_HOLDERS)
        if len(self._names) >= _MEMO_MAX:
            self._names.clear()
        self._names[(name, response, in_query)] = judged
        return judged

    def _secret(self, in_query: bool, response: bool) -> Callable[[str], bool]:
        r = self.redactor

        def secret(name: str) -> bool:
            return r.secret(name, response=response) or (in_query and r.secret_query(name))

        return secret

    def _walker(self, response: bool) -> Callable[[Any, str | None], Any]:
        def walk(v: Any, field: str | None) -> Any:
            return self._walk(v, False, response, field)

        return walk


def _drop_path(node: Any, path: tuple[str, ...]) -> Any:
    if not path:
        return PLACEHOLDER
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {k: (_drop_path(v, rest) if head in ("*", k) else v) for k, v in node.items()}
    if isinstance(node, list):
        return [
            _drop_path(v, rest) if head == "*" or head == str(i) else v
            for i, v in enumerate(node)
        ]
    return node
