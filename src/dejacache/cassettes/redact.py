"""Secrets out, placeholders in: applied to every tree before it reaches a cassette file.

``@cache`` arguments and HTTP requests both arrive as plain JSON trees, so the rules are
generic: header-like names anywhere (dict keys, or ``[name, value]`` pairs), query parameters
inside URL strings and inside ``params``/``query`` dicts, body fields anywhere, user-given
names, dotted paths and regexes, and secret-shaped strings (API keys, bearer tokens) wherever
they appear. ``substitute`` maps placeholders to live values: the live value is written as the
placeholder and restored on replay, so replayed data equals live data.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["DEFAULT_FIELDS", "DEFAULT_HEADERS", "DEFAULT_QUERY", "PLACEHOLDER", "Redactor",
           "SECRET_PATTERNS"]

PLACEHOLDER: Final = "<REDACTED>"

DEFAULT_HEADERS: Final = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key",
    "openai-organization", "openai-project", "cookie", "set-cookie", "x-amz-security-token",
})
DEFAULT_QUERY: Final = frozenset({"key", "api_key", "api-key", "sig", "token"})
DEFAULT_FIELDS: Final = frozenset({
    "api_key", "access_token", "refresh_token", "id_token", "client_secret", "password",
})
_QUERY_HOLDERS = frozenset({"params", "query", "query_params", "querystring"})

#: Secret-shaped strings, by kind (also used by ``dejacache scan``).
SECRET_PATTERNS: Final[dict[str, re.Pattern[str]]] = {
    "anthropic key": re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{16,}"),
    "openai key": re.compile(r"\bsk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
    "google api key": re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    "aws access key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "aws secret key": re.compile(
        r"(?i)aws_?secret_?access_?key[\"'\s:=]+[A-Za-z0-9/+]{40}"),
    "bearer token": re.compile(r"(?i)\bbearer\s+(?!<)[A-Za-z0-9_\-.~+/]{16,}=*"),
    "jwt": re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
}


# Substrings every match of each pattern contains: a cheap `in` test skips the regex for the
# common string (measured: the seven regexes were 80% of recording time on a 20 KB request).
_NEEDLES: Final[dict[str, tuple[str, ...]]] = {
    "anthropic key": ("sk-ant-",),
    "openai key": ("sk-",),
    "google api key": ("AIza",),
    "aws access key": ("AKIA", "ASIA"),
    "aws secret key": ("ecret", "ECRET"),
    "bearer token": ("earer", "EARER"),
    "jwt": ("eyJ",),
}
_MEMO_MAX = 8192


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


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
        extra = {_norm(n) for n in names}
        self.keys = {_norm(n) for n in DEFAULT_HEADERS | DEFAULT_FIELDS} | extra
        self.query = {_norm(n) for n in DEFAULT_QUERY} | extra
        self.paths = [tuple(p.split(".")) for p in paths]
        self.patterns = [re.compile(p) if isinstance(p, str) else p for p in patterns]
        self.guarded = [(_NEEDLES[k], p) for k, p in SECRET_PATTERNS.items()]
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

    # ---------------------------------------------------------------- write path

    def tree(self, tree: Any) -> Any:
        """A redacted copy of ``tree`` (the input is never modified)."""
        for path in self.paths:
            tree = _drop_path(tree, path)
        return self._walk(tree, in_query=False)

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
            s = pat.sub(_mask, s)
        for needles, pat in self.guarded:
            if any(n in s for n in needles):
                s = pat.sub(_mask, s)
        if "?" in s and "=" in s and "://" in s:
            s = self._url(s)
        if len(self._memo) >= _MEMO_MAX:
            self._memo.clear()
        self._memo[orig] = s
        return s

    def _url(self, s: str) -> str:
        def fix(m: re.Match[str]) -> str:
            url = m.group(0)
            try:
                parts = urllib.parse.urlsplit(url)
            except ValueError:
                return url
            if not parts.query:
                return url
            pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
            if not any(_norm(k) in self.query for k, _ in pairs):
                return url
            q = "&".join(
                f"{urllib.parse.quote(k, safe='')}="
                + (PLACEHOLDER if _norm(k) in self.query else urllib.parse.quote(v, safe=""))
                for k, v in pairs
            )
            return urllib.parse.urlunsplit(parts._replace(query=q))

        return _URL.sub(fix, s)

    def _walk(self, node: Any, in_query: bool) -> Any:
        t = type(node)
        if t is str:
            return self.text(node)
        if t is dict:
            out = {}
            for k, v in node.items():
                nk = _norm(k)
                if (nk in self.keys or (in_query and nk in self.query)) and v is not None:
                    out[k] = _placeholder(v)
                else:
                    out[k] = self._walk(v, nk in _QUERY_HOLDERS)
            return out
        if t is list:
            # [name, value] pairs: how HTTP headers and query params are often listed.
            if len(node) == 2 and type(node[0]) is str:
                n0 = _norm(node[0])
                if n0 in self.keys or (in_query and n0 in self.query):
                    return [node[0], _placeholder(node[1])]
            return [self._walk(v, in_query) for v in node]
        return node

    # ---------------------------------------------------------------- replay path

    def restore(self, tree: Any) -> Any:
        """Put live values back where ``substitute`` placeholders were written."""
        if not self.restore_map:
            return tree
        return _restore(tree, self.restore_map)


def _placeholder(v: Any) -> Any:
    return PLACEHOLDER if type(v) is not list else [PLACEHOLDER for _ in v]


def _mask(m: re.Match[str]) -> str:
    text = m.group(0)
    if text[:6].lower() == "bearer":
        return text[:7] + PLACEHOLDER
    return PLACEHOLDER


_URL = re.compile(r"https?://[^\s\"'<>]+")


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
