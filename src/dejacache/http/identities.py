"""Who is asking: a request's identity headers as keyed digests, and how a replay whose
credentials differ from the recording's still finds it without ever guessing.

A key holds ``"identity": ["authorization@SCOPE#DIGEST", "cookie:sid@SCOPE#DIGEST", ...]``:
one item per identity header (``headers.py``), a cookie per name; the *scope* is where the
credential applies (a provider, or ``http.<host>`` for any other API), the digest a keyed
BLAKE2b of the value made with the per-user masking key (``_secrets.keyed_digest``), so
neither the key nor a file holding it can be turned back into a credential. alice's and
bob's ``GET /me`` key apart, and each is answered with its own recording in any order.

A digest made on another machine (CI's secrets, a rotated token) is another digest. Within a
block, :class:`IdentityTable` maps this run's value of an item onto the recording's when
that cannot be wrong: the value may be a credential (not a setting such as a ``theme=dark``
cookie or ``X-Token-Limit: 100``, :func:`headers.is_setting`, which says what is asked,
under a name that does not say credential on its own), the recording holds exactly one value
of that item for the scope and this run has sent no other. Where the recording holds several
(alice and bob), or this run sends a second one, nothing is mapped: the call keys with its
own digest, misses, and the miss says why (:meth:`IdentityTable.note`).

Cookies the server set during the block (``Set-Cookie`` on a live answer) are echoes, like
ids: a replayed answer hands back no cookie (a file never holds one), so the request after a
login carries the session cookie live and none in replay. They are left out of the identity.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from .._secrets import is_secret_name, keyed_digest
from ..config import Effective
from ._blocks import PerBlock
from .headers import cookie_pairs, is_setting

__all__ = ["ITEM", "IdentityTable", "Item", "identities_for", "items_of", "scope_of", "spell"]

# The digest's person string: a digest of the same bytes made for another purpose differs.
_PERSON: Final = b"dejacache-ident"
_SIZE: Final = 16  # 128 bits: no two identities of one test suite collide

#: One item as a file holds it (a JSON string ``"NAME@SCOPE#DIGEST"``): :func:`spell`'s
#: spelling, read back by ``Tape.identities``.
ITEM: Final = re.compile(rb'"([^\s"@]{1,256})@([^\s"#]{1,512})#([0-9a-f]{32})"')

#: ``(item name, scope)``: what one digest says who asks for.
Item = tuple[str, str]


def scope_of(provider: str, name: str) -> str:
    """Where credentials apply: the provider (``openai``), or the host's call name for
    any other API (``http.api.github.com``)."""
    return name if provider == "http" else provider


def spell(item: Item, digest: str) -> str:
    return f"{item[0]}@{item[1]}#{digest}"


def _value(name: str, value: str) -> str:
    """The part of a header value that names who asks. An AWS SigV4 ``Authorization``
    changes with every request (date, signature): only its access key, region and service
    name the caller."""
    if name == "authorization" and value.startswith("AWS4-"):
        cred = value.partition("Credential=")[2].partition(",")[0]
        key, _, rest = cred.partition("/")
        return "AWS4 " + "/".join([key, *rest.split("/")[1:3]])
    return value


class Setting(str):
    """The digest of a value that is a setting, not a credential (``headers.is_setting``):
    keyed as itself, never mapped onto a recording's value. Marked on the digest so that
    every table it meets (an HTTP call's, an MCP session's) knows it without the value."""

    __slots__ = ()


def _digest(name: str, value: str) -> str:
    d = keyed_digest(f"{name}\x00{value}".encode("utf-8", "surrogatepass"), _PERSON, _SIZE)
    return Setting(d) if is_setting(value) and not _names_credential(name) else d


def _names_credential(name: str) -> bool:
    """Whether an item's name says credential on its own (``Authorization``, ``X-Api-Key``,
    ``?access_token=``, an MCP server's ``--api-key`` argument or ``env=`` entry), so that
    any value under it, CI's ``dummy`` included, is one. A cookie's name is the site's
    choice, and a header named with credential words (``X-Token-Limit``) or a ``?key=``
    parameter may as well carry a setting: there, only the value tells."""
    kind, colon, rest = name.partition(":")
    if not colon:
        return is_secret_name(name)
    return kind in ("arg", "env") or is_secret_name(rest)


def items_of(scope: str, pairs: Iterable[tuple[str, str]],
             echo: frozenset[str] = frozenset()) -> list[tuple[Item, str]]:
    """Identity ``pairs`` (``(name, value)``) as ``((item name, scope), digest)``, sorted: a
    cookie per name, without the cookies named in ``echo``."""
    out: list[tuple[Item, str]] = []
    for name, value in pairs:
        if name == "cookie":
            for k, v in cookie_pairs(value):
                if k not in echo:
                    out.append(((f"cookie:{k}", scope), _digest(f"cookie:{k}", v)))
            continue
        out.append(((name, scope), _digest(name, _value(name, value))))
    return sorted(out)


Recorded = Callable[[], Mapping[Item, frozenset[str]]]


class IdentityTable:
    """One block's identities: the cookies its servers set, and for each item and digest
    this run sent, the digest it keys with (its own, or the recording's only one)."""

    __slots__ = ("_decided", "_echo", "_lock", "_notes", "_sent")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._echo: dict[str, frozenset[str]] = {}
        self._decided: dict[tuple[Item, str], str] = {}
        self._sent: dict[Item, set[str]] = {}
        self._notes: dict[tuple[Item, str], str] = {}

    def echo(self, scope: str) -> frozenset[str]:
        return self._echo.get(scope, frozenset())

    def set_cookies(self, scope: str, headers: Iterable[tuple[str, str]]) -> None:
        """Note the cookies a live answer for ``scope`` set."""
        names = {cookie_pairs(v)[0][0] for k, v in headers
                 if k.lower() == "set-cookie" and cookie_pairs(v)}
        if names and not names <= self.echo(scope):
            with self._lock:
                self._echo[scope] = self.echo(scope) | names

    def decided(self, item: Item, digest: str) -> str | None:
        return self._decided.get((item, digest))

    def exact(self, item: Item, digest: str) -> None:
        """The recording holds this very value: it keys as itself."""
        with self._lock:
            self._decided.setdefault((item, digest), digest)
            self._sent.setdefault(item, set()).add(digest)

    def resolve(self, item: Item, digest: str, recorded: Recorded) -> str:
        """The digest to key ``item`` with, decided once per value for the block, given what
        the recording holds (read only when the call as sent was not recorded)."""
        done = self._decided.get((item, digest))
        if done is not None:
            return done
        held = recorded().get(item, frozenset())
        with self._lock:
            done = self._decided.get((item, digest))
            if done is not None:
                return done
            others = self._sent.setdefault(item, set()) - {digest}
            use = digest
            if held and digest not in held:
                if type(digest) is Setting:
                    self._notes[(item, digest)] = _setting(item)
                elif len(held) == 1 and not others:
                    use = next(iter(held))
                else:
                    self._notes[(item, digest)] = _ambiguous(item, len(held), len(others) + 1)
            self._decided[(item, digest)] = use
            self._sent[item].add(digest)
            return use

    def note(self, item: Item, digest: str) -> str | None:
        """Why this value of ``item`` could not be keyed as the recording's, if so."""
        return self._notes.get((item, digest))

    def settle(self, store: object, key: str, items: list[tuple[Item, str]]
               ) -> list[str] | None:
        """A call keyed ``key`` with values new to the block: None when ``store`` holds it
        so (each value then keys as itself), else its items spelled with the recording's
        one value of each where that mapping is sure (``resolve``). The one step of HTTP
        requests and MCP calls alike."""
        holds = getattr(store, "holds", None)
        if holds is None or holds(key):
            for item, digest in items:
                self.exact(item, digest)
            return None
        recorded = getattr(store, "identities", dict)
        return sorted(spell(i, self.resolve(i, d, recorded)) for i, d in items)


def _ambiguous(item: Item, held: int, sent: int) -> str:
    name, scope = item
    return (f"the {name} this call sends to {scope} is not one it was recorded with, and "
            f"dejacache cannot tell which recorded caller it stands for: the recording holds "
            f"{held} value{'s' if held != 1 else ''} of {name} for {scope} and this run sent "
            f"{sent}. Credentials are mapped only one to one, never by guess: replay with the "
            "credentials (and DEJACACHE_SECRET_KEY) the cassette was recorded with, or "
            "re-record it.")


def _setting(item: Item) -> str:
    name, scope = item
    return (f"the {name} this call sends to {scope} is not one it was recorded with, and it is "
            "a setting, not a credential (shorter than 8 characters, or one word of letters): "
            "it may change the answer, so it is never stood in for the recorded one. Replay "
            "with the DEJACACHE_SECRET_KEY the cassette was recorded with (its digest then "
            "matches when the value does), or re-record it.")


_TABLES: PerBlock[IdentityTable] = PerBlock(IdentityTable)


def identities_for(eff: Effective) -> IdentityTable | None:
    return _TABLES.get(eff)
