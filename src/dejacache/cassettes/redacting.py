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
    from .redact import Redactor

__all__ = ["Writing"]

# Dicts whose members are URL query parameters (``secret_query`` applies to their names).
_QUERY_HOLDERS = frozenset({"params", "query", "query_params", "querystring"})
_MEMO_MAX = 8192


class Writing:
    """What :meth:`Redactor.tree` and :meth:`Redactor.text` do, for one redactor (which
    decides the names); each distinct string is scanned once (agents resend the same
    messages every step)."""

    __slots__ = ("_memo", "redactor")

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._memo: dict[str, str] = {}

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
        if t is not dict and t is not list:
            return node
        r = self.redactor

        def secret(name: str) -> bool:
            return r.secret(name, response=response) or (in_query and r.secret_query(name))

        def walk(v: Any, field: str | None) -> Any:
            return self._walk(v, False, response, field)

        if t is dict:
            out = {}
            for k, v in node.items():
                kind = _secrets.DATA if v is None else _secrets.held_kind(k, v, secret)
                out[k] = (_secrets.held(kind, v, _secrets.placeholder, walk) if kind
                          else self._walk(v, _secrets.normalize(k) in _QUERY_HOLDERS, response, k))
            return out
        kind = _secrets.pair_kind(node, secret, parent)
        if kind:
            return [node[0], _secrets.held(kind, node[1], _secrets.placeholder, walk)]
        return [self._walk(v, in_query, response, None) for v in node]


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
