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

import functools
import re
from collections.abc import Iterable, Mapping

from .. import _secrets
from .._secrets import PLACEHOLDER, is_secret_name, is_secret_query
from ..errors import ConfigurationError

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Final

    from .redacting import Writing

# SECRET_PATTERNS is read through __getattr__ (compiled on first use); PLACEHOLDER is
# defined with the other rules of what a file may show, in ``_secrets``.
__all__ = ["DEFAULT_FIELDS", "DEFAULT_HEADERS", "DEFAULT_QUERY", "PLACEHOLDER", "Redactor"]

#: Kept for reference and compatibility; matching uses ``_secrets`` (spelling-insensitive).
DEFAULT_HEADERS: Final = frozenset({
    "authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key",
    "openai-organization", "openai-project", "cookie", "set-cookie", "x-amz-security-token",
})
DEFAULT_QUERY: Final = _secrets.AUTH_QUERY
DEFAULT_FIELDS: Final = _secrets.SECRET_NAMES


def _norm(name: str) -> str:
    return _secrets.normalize(name)


def _spec_items(spec: Any) -> list[str | re.Pattern[str]]:
    # A number or a dict of non-strings failed as "not iterable" or "argument of type 'int'
    # is not iterable" from the loop below, naming neither redact= nor the value.
    try:
        items = list(spec)
    except TypeError:
        items = [spec]
    for item in items:
        if not isinstance(item, (str, re.Pattern)):
            raise ConfigurationError(
                f"redact= takes names, dotted paths and compiled regexes (or a Redactor), "
                f"not {item!r}")
    return items


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
        for item in _spec_items(spec):
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
        return self._writing.tree(tree, response)

    def text(self, s: str) -> str:
        """``s`` as the file holds it."""
        return self._writing.text(s)

    @functools.cached_property
    def _writing(self) -> Writing:
        # The write path (``redacting.py``), made with the first tree written: a replay hit
        # only restores ``substitute`` values, and never loads it (7 KB of bytecode).
        from .redacting import Writing

        return Writing(self)

    # ---------------------------------------------------------------- replay path

    def restore(self, tree: Any) -> Any:
        """Put live values back where ``substitute`` placeholders were written."""
        if not self.restore_map:
            return tree
        return _restore(tree, self.restore_map)


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
