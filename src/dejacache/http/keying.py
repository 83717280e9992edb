"""An HTTP request's key: the canonical form, the caller's identity, and the older forms
recordings made before hold the same call under.

The key is taken over the canonical form without the body's prompt-cache controls
(``Provider.cache_fields``: Anthropic's ``cache_control``, OpenAI's ``prompt_cache_key``...),
so adding a breakpoint or a routing key never makes a recording miss; the canonical form that
is stored keeps them (the planner reads the breakpoints a recording was made with). A body
without them is keyed by its one canonical form, as before.

``keyed`` is what every transport's ``_prepare`` asks: the request headers that change the
answer (``headers.py``), who is asking (``identities.py``: digests, mapped one to one onto a
recording made with other credentials), the canonical request and its key (``exchange.py``),
and, in a cassette, the first older spelling the file holds: the form before request headers
counted (``exchange.legacy_request``), or before URL ids were aliased, or with its
prompt-cache controls keyed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any, NamedTuple

from .._core.cache_fields import may_hold
from ..config import Effective
from ..errors import ReplayMiss
from .exchange import (
    caller_query,
    canonical_request,
    legacy_request,
    query_identity,
    request_key,
    unquoted,
    volatile_for,
)
from .headers import classify
from .identities import IdentityTable, Item, identities_for, items_of, scope_of, spell

__all__ = ["Identity", "Keyed", "keyed"]


@dataclasses.dataclass(slots=True)
class Identity:
    """Who a request is from: its identity ``items`` as this run sent them (item, digest),
    and ``keyed``, the spelled items its key holds (a value may be the recording's).
    ``pending``: some value is still to be checked against the recording."""

    items: list[tuple[Item, str]] = dataclasses.field(default_factory=list)
    keyed: list[str] | None = None
    pending: bool = False
    table: IdentityTable | None = None

    def notes(self) -> list[str]:
        """Why values of this call could not be keyed as the recording's, when so."""
        t = self.table
        if t is None:
            return []
        return [n for n in (t.note(i, d) for i, d in self.items) if n]

    def explain(self, miss: ReplayMiss) -> ReplayMiss:
        """``miss``, saying why values of this call could not be keyed as the recording's
        caller's, when so."""
        text = str(miss)
        for note in self.notes():
            if note not in text:
                miss.args = (f"{miss.args[0]}\n  {note}", *miss.args[1:])
        return miss


_NOBODY = Identity()


class Keyed(NamedTuple):
    key: str
    canonical: bytes
    stream: bool
    identity: Identity
    older: tuple[str, bytes] | None  #: (key, canonical) a cassette holds the call under


def keyed(eff: Effective, name: str, args: tuple[Any, ...],
          headers: Iterable[tuple[str, str]] | None) -> Keyed:
    """``args``: ``canonical_request``'s positional arguments (method, path, query, body,
    content type, provider, aliases, volatile items, substitutions). ``headers`` None: the
    form before request headers counted, as importers write it. A body quoting the request's
    own credentials is keyed, in every form, with each replaced by a token naming it
    (``exchange.unquoted``)."""
    if headers is None:
        canonical, stream = canonical_request(*args, legacy=True)
        return Keyed(request_key(eff.namespace or "", name, canonical), canonical, stream,
                     _NOBODY, None)
    headers = tuple(headers)
    body = unquoted(args[3], headers, args[2])
    if body is not args[3]:  # the body quotes its own credentials: keyed and stored as tokens
        args = (*args[:3], body, *args[4:])
    provider, aliases, extra = args[5], args[6], args[7]
    names, _, _, keep, _ = volatile_for(provider.name, extra, provider.volatile)
    kh = classify(headers, provider=provider.name != "http", volatile=names, keep=keep)
    ident = _identity(eff, provider.name, name, _who(provider.name, kh.identity, args[2]))
    canonical, stream = canonical_request(*args, headers=kh.plain, identity=ident.keyed)
    key = _key(eff, name, args, canonical, kh.plain, ident.keyed)
    if ident.pending:
        canonical, key = _mapped(eff, name, ident, args, kh.plain, canonical, key)
    older = None
    if eff.features.sequenced:
        path = args[1]
        unaliased = aliases is not None and len(aliases) > 0 and aliases.apply(path) != path
        older = _older(eff, name, args, canonical, kh.plain, ident.keyed, unaliased, key)
    return Keyed(key, canonical, stream, ident, older)


def _key(eff: Effective, name: str, args: tuple[Any, ...], canonical: bytes,
         plain: dict[str, str], identity: list[str] | None) -> str:
    """The key of ``canonical``: over the form without the body's prompt-cache controls
    when it holds some. Canonicalised a second time, only then: a 279 KB Anthropic
    conversation carrying markers keys in ~1.0 ms instead of ~0.4 (measured median); the
    stored form keeps the markers, which the prompt-cache planner reads."""
    fields = args[5].cache_fields
    if may_hold(args[3], fields):
        bare = canonical_request(*args, headers=plain, identity=identity,
                                 cache_fields=fields)[0]
        return request_key(eff.namespace or "", name, bare)
    return request_key(eff.namespace or "", name, canonical)


def _who(provider: str, headers: tuple[tuple[str, str], ...],
         query: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The identity pairs of a request: its identity headers, and its query's credentials,
    on a provider's endpoint but its API key (a role there, as in a header)."""
    found = query_identity(query) if provider == "http" else query_identity(query, caller_query)
    return (*headers, *found) if found else headers


def _identity(eff: Effective, provider: str, name: str,
              pairs: tuple[tuple[str, str], ...]) -> Identity:
    if not pairs:
        return _NOBODY
    scope = scope_of(provider, name)
    table = identities_for(eff)
    items = items_of(scope, pairs, table.echo(scope) if table is not None else frozenset())
    if not items:
        return _NOBODY
    if table is None:
        return Identity(items, [spell(i, d) for i, d in items])
    uses = [table.decided(i, d) for i, d in items]
    spelled = sorted(spell(i, u or d) for (i, d), u in zip(items, uses, strict=True))
    return Identity(items, spelled, None in uses, table)


def _mapped(eff: Effective, name: str, ident: Identity, args: tuple[Any, ...],
            plain: dict[str, str], canonical: bytes, key: str) -> tuple[bytes, str]:
    """A call with identity values new to the block: keyed as they are when the recording
    holds the call so, else each as the recording's one value of its item where that mapping
    is sure (``IdentityTable.resolve``)."""
    table = ident.table
    assert table is not None
    spelled = table.settle(eff.store, key, ident.items)
    if spelled is None or spelled == ident.keyed:
        return canonical, key
    ident.keyed = spelled
    canonical = canonical_request(*args, headers=plain, identity=spelled)[0]
    return canonical, _key(eff, name, args, canonical, plain, spelled)


@functools.lru_cache(maxsize=64)  # a file's shapes are one object: asked once per call
def _pre_header(shapes: frozenset[frozenset[str] | None] | None) -> bool:
    """Whether a file whose recorded requests have these member-name sets may hold a call
    keyed before request headers counted: an HTTP request (``method`` and ``path``)
    without ``headers``, or one it could not read (None: not read yet, or unreadable).
    A file recorded since holds none: its calls skip computing those keys (~40 us each
    through the proxy)."""
    if shapes is None:
        return True
    return any(s is None or ("method" in s and "path" in s and "headers" not in s)
               for s in shapes)


def _older(eff: Effective, name: str, args: tuple[Any, ...], canonical: bytes,
           plain: dict[str, str], identity: list[str] | None, unaliased: bool, key: str
           ) -> tuple[str, bytes] | None:
    """The form a recording made before request headers counted, or before prompt-cache
    controls were left out of keys, holds this call under, when the cassette has one: looked
    up first (``_Call.raw``), so cassettes recorded then still replay as they did (an exact
    match, cache controls included). ``unaliased``: the URL's ids were aliased, which older
    recordings did not do either."""
    store: Any = eff.store
    holds = getattr(store, "holds", None)
    if holds is None:
        return None
    ns = eff.namespace or ""
    forms = []
    if request_key(ns, name, canonical) != key:  # keyed with its cache controls before
        forms.append(canonical)
    shapes = getattr(store, "request_shapes", None)
    if shapes is None or _pre_header(shapes()):
        forms.append(legacy_request(canonical, *args, headers=plain, identity=identity))
        if unaliased:
            forms.append(canonical_request(*args, alias_path=False, legacy=True)[0])
    for form in forms:
        key = request_key(ns, name, form)
        if holds(key):
            return key, form
    return None
