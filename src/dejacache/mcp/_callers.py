"""Who is asking an MCP server: the credentials of its URL and the headers its transport
sends (HTTP), or those its launch names (stdio), as identity items, keyed and mapped onto a
recording's as HTTP keys map them.

One URL may be several servers: a gateway that scopes tools and data by its token answers
alice's session with alice's tickets and bob's with bob's. A server's identity
(``_wire.http_identity``) leaves the credentials out, so each call's key also holds
``"identity": ["query:token@mcp.HOST/PATH#DIGEST", "authorization@...", ...]``: HTTP's items
(``http/identities.py``), a keyed digest per credential value, never the value. alice's and
bob's calls key apart, and each replays its own recording. A stdio server is launched by
whoever holds the credentials on its command line and in its ``env=`` (``stdio_launch``):
the same items, scoped to the launch.

A digest made on another machine (CI's token, a rotated one) is another digest: within a
block, HTTP's :class:`~dejacache.http.identities.IdentityTable` stands this run's value for
the recording's only where that cannot be wrong (the recording holds one value of that item
and this run sent no other), else the call misses and the miss says why. One rule for both:
an MCP call is asked about its identity as an HTTP request is.

The values themselves are kept too, in memory only, for the session's life
(:attr:`Callers.secrets`): a server may quote the credential it was given (a GitHub server
started with ``GITHUB_TOKEN`` answering "Bad credentials: KEY", a gateway echoing its
``Authorization``), and what is stored of a live answer is stored without them, by HTTP's
one rule (``http.exchange.unechoed``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..config import Effective
from ..http.headers import classify, quotable
from ..http.identities import Item, identities_for, items_of, spell
from ..http.keying import Identity
from . import _wire

__all__ = ["NOBODY", "Callers", "Identity", "as_sent", "callers_of", "keyed", "stdio_launch"]

# ``_wire.stdio_credentials``' pairs of the run's temp directories a launch names (a pytest
# ``tmp_path``), in its ``env=`` and on its command line: keyed, but no credential an answer
# could leak.
_NOT_SECRET = frozenset({"env", "paths"})


class Callers:
    """Who a session says is asking, from its ``(name, value)`` identity pairs: the items
    its calls are keyed with (:attr:`items`, each value a keyed digest) and the values as
    an answer may quote them (:attr:`secrets`, ``http.headers.quotable``)."""

    __slots__ = ("items", "secrets")

    def __init__(self, scope: str, pairs: Sequence[tuple[str, str]]) -> None:
        self.items: list[tuple[Item, str]] = items_of(scope, pairs) if pairs else []
        self.secrets = quotable([(n, v) for n, v in pairs if n not in _NOT_SECRET])

    def unechoed(self, value: dict[str, Any]) -> dict[str, Any]:
        """``value`` (a live answer, as it will be stored) without the session's own
        credentials wherever it quotes them: ``value`` itself when it quotes none."""
        if not self.secrets:
            return value
        # Imported here: a session with no credentials, and every replay, never load the
        # HTTP exchange's machinery for it.
        from ..http.exchange import unechoed

        return unechoed(value, self.secrets)


NOBODY = Callers("", ())  # a session that names no credential


def callers_of(url: str, headers: Iterable[tuple[str, str]] = ()) -> Callers:
    """Who a session to the server at ``url`` is, sending ``headers`` with every request.
    Made once per session. Who is asking is what HTTP keys so: the URL's credentials, and
    the headers ``http.headers.classify`` says name the caller (``Authorization``,
    ``X-Api-Key``, a cookie, a secret-shaped value...)."""
    pairs = (*_wire.http_credentials(url), *classify(headers, provider=False).identity)
    return Callers(_wire.http_scope(url), pairs)


def stdio_launch(command: str, args: Sequence[str], env: Mapping[str, str] | None = None,
                 cwd: str | None = None) -> tuple[dict[str, Any], Callers]:
    """A stdio server as every face names it: its plain identity (``_wire.stdio_identity``:
    its ``env=``'s settings included) and who launched it (``_wire.stdio_credentials``: the
    credentials of its command line and ``env=``, and the run's directories it names; one
    rule, ``_wire.stdio_env``; never the inherited environment). Made once per session."""
    parts = _wire.stdio_env(env)
    server = _wire.stdio_identity(command, args, cwd, parts.settings)
    return server, Callers(_wire.stdio_scope(server),
                           _wire.stdio_credentials(args, parts, cwd))


def as_sent(items: Iterable[tuple[Item, str]]) -> list[str]:
    """The items as a key outside a block holds them, each value as itself."""
    return sorted(spell(i, d) for i, d in items)


def _key(eff: Effective, server: Mapping[str, Any], spelled: list[str] | None, method: str,
         params: Mapping[str, Any] | None) -> tuple[str, bytes]:
    whom = server if spelled is None else {**server, "identity": spelled}
    return _wire.canonical(eff.namespace or "", whom, method, params, eff.volatile,
                           eff.key_substitute)


def keyed(eff: Effective, server: Mapping[str, Any], items: list[tuple[Item, str]],
          method: str, params: Mapping[str, Any] | None) -> tuple[str, bytes, Identity | None]:
    """``(key, canonical, identity)`` of one request to ``server`` made with ``items``: each
    item keyed as this run sent it when the recording holds the call so, else as the
    recording's one value of that item where that mapping is sure."""
    if not items:
        key, canonical = _key(eff, server, None, method, params)
        return key, canonical, None
    table = identities_for(eff)
    if table is None:  # outside test-facing blocks: each value as itself
        own = as_sent(items)
        return (*_key(eff, server, own, method, params), Identity(items, own))
    uses = [table.decided(i, d) for i, d in items]
    spelled = sorted(spell(i, u or d) for (i, d), u in zip(items, uses, strict=True))
    key, canonical = _key(eff, server, spelled, method, params)
    if None in uses:
        mapped = table.settle(eff.store, key, items)
        if mapped is not None and mapped != spelled:
            spelled = mapped
            key, canonical = _key(eff, server, spelled, method, params)
    return key, canonical, Identity(items, spelled, False, table)
