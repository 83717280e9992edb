"""Secrets out, placeholders in: applied to every tree before it reaches a cassette file.

``@cache`` arguments and HTTP requests both arrive as plain JSON trees, so the rules are
generic: credential names anywhere (dict keys, or ``[name, value]`` pairs), query parameters
inside URL strings and inside ``params``/``query`` dicts, user-given names, dotted paths and
regexes, secret-shaped strings (API keys, bearer tokens) wherever they appear, and the keyed
``<secret:...>`` masks of canonical requests (a committed file must not depend on the machine
that wrote it). What counts as a credential is decided in one place, ``dejacache._secrets``.

``substitute`` maps placeholders to live values: the live value is written as the placeholder
and restored on replay, so replayed data equals live data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from .. import _secrets
from .._secrets import is_secret_name, is_secret_query

# SECRET_PATTERNS is read through __getattr__ (compiled on first use).
__all__ = ["DEFAULT_FIELDS", "DEFAULT_HEADERS", "DEFAULT_QUERY", "PLACEHOLDER", "Redactor"]

PLACEHOLDER: Final = "<REDACTED>"

#: Kept for reference and compatibility; matching uses ``_secrets`` (spelling-insensitive).
DEFAULT_HEADERS: Final = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key",
    "openai-organization", "openai-project", "cookie", "set-cookie", "x-amz-security-token",
})
DEFAULT_QUERY: Final = _secrets.AUTH_QUERY
DEFAULT_FIELDS: Final = _secrets.SECRET_NAMES
_QUERY_HOLDERS = frozenset({"params", "query", "query_params", "querystring"})
_MEMO_MAX = 8192


def _norm(name: str) -> str:
    return _secrets.normalize(name)


def _placeholder_text(_: str) -> str:
    return PLACEHOLDER


class Redactor:
    """Rewrites JSON trees so no listed secret is written, and undoes ``substitute``.

    ``names``: extra header / field / query parameter names; ``paths``: dotted paths from the
    root of a request or response (``*`` matches any key or list index); ``patterns``: regexes
    whose matches are replaced in every string.
    """

    def __init__(
        self,
        names: Iterable[str] = (),
        *,
        paths: Iterable[str] = (),
        patterns: Iterable[str | re.Pattern[str]] = (),
        substitute: Mapping[str, str] | None = None,
    ) -> None:
        self.extra = {_norm(n) for n in names}
        self.paths = [tuple(p.split(".")) for p in paths]
        self.patterns = [re.compile(p) if isinstance(p, str) else p for p in patterns]
        self._memo: dict[str, str] = {}
        # Longest live value first, so a value containing another is replaced whole.
        subs = {k: v for k, v in (substitute or {}).items() if v}
        self.substitute = sorted(subs.items(), key=lambda kv: -len(kv[1]))
        self.restore_map = dict(subs)

    @classmethod
    def from_spec(cls, spec: Any, substitute: Mapping[str, str] | None = None) -> Redactor:
        """From the ``redact=`` argument: names, dotted paths (contain ``.``), compiled
        regexes, or a ready ``Redactor``."""
        if isinstance(spec, Redactor):
            return spec
        if spec is None:
            spec = ()
        if isinstance(spec, (str, re.Pattern)):
            spec = (spec,)
        names, paths, patterns = [], [], []
        for item in spec:
            if isinstance(item, re.Pattern):
                patterns.append(item)
            elif "." in item:
                paths.append(item)
            else:
                names.append(item)
        return cls(names, paths=paths, patterns=patterns, substitute=substitute)

    # ---------------------------------------------------------------- names

    def secret(self, name: str, *, response: bool = False) -> bool:
        """Whether a value under ``name`` is written as the placeholder."""
        forms = _secrets.name_forms(name)
        return (not forms.isdisjoint(self.extra)
                or not forms.isdisjoint(_secrets.SENSITIVE_HEADERS)
                or is_secret_name(name, response=response))

    def secret_query(self, name: str) -> bool:
        return _norm(name) in self.extra or is_secret_query(name)

    # ---------------------------------------------------------------- write path

    def tree(self, tree: Any, *, response: bool = False) -> Any:
        """A redacted copy of ``tree`` (the input is never modified). ``response``: names that
        are credentials only in requests (a logprobs ``token``) are left as data."""
        for path in self.paths:
            tree = _drop_path(tree, path)
        return self._walk(tree, False, response)

    def text(self, s: str) -> str:
        # Agents resend the same messages every step: each distinct string is scanned once.
        done = self._memo.get(s)
        if done is not None:
            return done
        orig = s
        for placeholder, live in self.substitute:
            if live in s:
                s = s.replace(live, placeholder)
        for pat in self.patterns:
            s = pat.sub(PLACEHOLDER, s)
        if _secrets.MASK_PREFIX in s:  # canonical requests carry keyed masks: machine-specific
            s = _secrets.MASK_RE.sub(PLACEHOLDER, s)
        s = _secrets.mask_text(s, _placeholder_text, self.secret_query)
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[orig] = s
        return s

    def _walk(self, node: Any, in_query: bool, response: bool) -> Any:
        t = type(node)
        if t is str:
            return self.text(node)
        if t is dict:
            out = {}
            for k, v in node.items():
                if v is not None and (self.secret(k, response=response)
                                      or (in_query and self.secret_query(k))):
                    out[k] = _placeholder(v)
                else:
                    out[k] = self._walk(v, _norm(k) in _QUERY_HOLDERS, response)
            return out
        if t is list:
            # [name, value] pairs: how HTTP headers and query params are often listed.
            if len(node) == 2 and type(node[0]) is str and (
                self.secret(node[0], response=response)
                or (in_query and self.secret_query(node[0]))
            ):
                return [node[0], _placeholder(node[1])]
            return [self._walk(v, in_query, response) for v in node]
        return node

    # ---------------------------------------------------------------- replay path

    def restore(self, tree: Any) -> Any:
        """Put live values back where ``substitute`` placeholders were written."""
        if not self.restore_map:
            return tree
        return _restore(tree, self.restore_map)


def _placeholder(v: Any) -> Any:
    t = type(v)
    if t is dict:  # every leaf under a credential name; the shape stays, for diffs
        return {k: _placeholder(x) for k, x in v.items()}
    if t is list:
        return [_placeholder(x) for x in v]
    return PLACEHOLDER if v is not None and t is not bool else v


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


def _restore(node: Any, subs: Mapping[str, str]) -> Any:
    t = type(node)
    if t is str:
        for placeholder, live in subs.items():
            if placeholder in node:
                node = node.replace(placeholder, live)
        return node
    if t is dict:
        return {k: _restore(v, subs) for k, v in node.items()}
    if t is list:
        return [_restore(v, subs) for v in node]
    return node


def __getattr__(name: str) -> Any:
    # The secret patterns compile on first read (~3-8 ms): a replay that scrubs nothing
    # never reads them.
    if name == "SECRET_PATTERNS":
        return _secrets.SECRET_PATTERNS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
