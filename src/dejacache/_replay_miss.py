"""Why a replay found nothing: the nearest recorded call, its field diff, the message.

The engine decides that a replay missed (``_engine``: the flow's ``Refuse``); this module
explains it, as the ``ReplayMiss`` the driver raises. Loaded by the first replay miss: a
replay that hits never needs it (12 KB of bytecode, a fifth of the engine's, and the report's
imports: ``_core/diff.py``, ``_learn/suggest.py``).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, cast

import orjson

from ._core.diff import distance, nearest, short
from ._secrets import PLACEHOLDER, scrub_request
from .config import Effective
from .errors import ReplayMiss
from .stores._base import off_loop

if TYPE_CHECKING:
    from .stores._protocols import SequencedStore

__all__ = ["areplay_miss", "replay_miss"]


def replay_miss(eff: Effective, name: str, key: str, canonical: bytes) -> ReplayMiss:
    """A ``ReplayMiss`` explaining the call and its nearest recorded sibling."""
    try:
        target = orjson.loads(scrub_request(canonical))
    except orjson.JSONDecodeError:
        target = canonical.decode(errors="replace")
    features = eff.features
    if features.redacts:  # a cassette: the report must not show what the file may not hold
        target = cast("SequencedStore", eff.store).redact_tree(target)
    lines = [
        f"dejacache replay miss: no recording of {name} matches this call "
        f"(mode 'replay', source {eff.source}).",
        f"  key: {key}   namespace: {eff.namespace!r}",
        f"  call: {short(target, 400)}",
    ]
    diff: list[str] = []
    cands: list[tuple[str, Any]] = []
    try:
        cands = [
            (k, orjson.loads(r.request))
            for k, r in itertools.islice(
                eff.store.iterate(name=name, namespace=eff.namespace), 1000
            )
            if r.request
        ]
        near, older = _nearest(target, cands)
    except Exception as exc:  # explaining must never hide the miss itself
        near, older = None, False
        lines.append(f"  (could not search recorded calls: {exc!r})")
    if near is None:
        lines.append(f"  no call of {name} is recorded in this source.")
    else:
        nkey, _, diff = near
        lines.append(
            f"  nearest recorded call of {name}: key {nkey}; differences (recorded -> now):"
        )
        lines.extend(f"    {d}" for d in diff[:30])
        if len(diff) > 30:
            lines.append(f"    ... and {len(diff) - 30} more")
        if not diff and nkey == key:
            lines.append(
                "  (none: this very call is recorded, but all its recordings were already "
                "replayed; each identical call replays the next recorded answer, so the code "
                "now makes it more often than when it was recorded)")
        elif diff and all(d.startswith("identity") for d in diff):
            lines.append(
                "  the calls differ only in who is asking (credential or account headers, "
                "keyed as digests): replay with the credentials the cassette was recorded "
                "with, or leave a header that does not change the answer out with "
                "volatile=['<header name>'] (README, Keys)")
        elif not diff and not _masked(target):  # (masked credentials read alike: below)
            lines.append(
                "  (none: the recorded request reads exactly as this call does, yet it was "
                "recorded under another key: it was edited by hand after recording, and "
                "dejacache rehash refreshes checksums, never keys (the entry still answers "
                "the call it was recorded for), or it was recorded by another version of "
                "dejacache. Re-record the call.)")
        elif any("<secret:" in d or PLACEHOLDER in d for d in diff) or not diff:
            lines.extend(_credentials(near[1], target))
    if older:
        lines.append("  (the nearest call was recorded before request headers were part of "
                     "keys, so it is compared without them; re-recording keys them)")
    rules = _suggestion(near, target, cands, older)
    if rules:
        lines.append(f"  every difference is volatile text; "
                     f"{'this rule' if len(rules) == 1 else 'these rules'} would have made "
                     "it a hit:")
        lines.extend(f"      {r}" for r in rules)
        from ._learn.suggest import HOW

        lines.append(f"    {HOW}")
    hint = features.rerecord_hint or eff.rerecord_hint
    lines.append(
        f"  to re-record: {hint}" if hint else
        "  to re-record: run again with DEJACACHE_MODE=record (or mode='record' on the block)"
    )
    miss = ReplayMiss("\n".join(lines), name=name, key=key, source=eff.source, diff=diff)
    miss.request = target
    miss.suggestion = tuple(rules or ())
    if features.notes_misses:  # a cassette keeps the report: SDKs and frameworks often wrap it
        # (a strict cassette answers with the divergence to raise instead: the first
        # out-of-order call is the one to report, not the miss it leads to)
        miss = cast("SequencedStore", eff.store).note_miss(miss) or miss
    return miss


def _credentials(recorded: Any, target: Any) -> list[str]:
    """What the miss says of the masked credentials its diff shows: that the calls differ
    only in them, or which fields differ beside them (a timestamp next to a redacted key:
    the credential reads alike, the timestamp is the difference, ``_learn.diffs``)."""
    try:
        from ._learn.diffs import CREDENTIAL, differences

        found = differences(recorded, target)
    except Exception:  # explaining must never hide the miss itself
        return []
    beside = [d.where for d in found if d.kind != CREDENTIAL and _masked([d.a, d.b])]
    if beside:
        return [f"  {', '.join(beside)}: differs beside the credential it holds, which reads "
                "alike in both"]
    if any(d.kind != CREDENTIAL for d in found):
        return []
    return ["  the calls differ only in credentials, which keys mask with a per-machine "
            "key: declare them with substitute={'<NAME>': live_value}, ignore them, or "
            "share DEJACACHE_SECRET_KEY (README, Keys)"]


def _masked(request: Any) -> bool:
    """Whether the stored form of a request holds a masked credential (one that keys by a
    per-machine digest, so two calls that read alike may key apart)."""
    text = repr(request)
    return PLACEHOLDER in text or "<secret:" in text


def _suggestion(near: tuple[str, Any, list[str]] | None, target: Any,
                cands: list[tuple[str, Any]], older: bool) -> list[str] | None:
    """The volatile rules that would have made the call hit its nearest recording (None:
    some difference is not volatile text, or the rules would merge recordings)."""
    if near is None or older or not near[2]:
        return None
    try:
        from ._learn.suggest import for_miss

        http = type(target) is dict and "method" in target
        return for_miss(near[1], target, [c for _, c in cands], "http" if http else "call")
    except Exception:  # explaining must never hide the miss itself
        return None


def _nearest(target: Any, cands: list[tuple[str, Any]]
             ) -> tuple[tuple[str, Any, list[str]] | None, bool]:
    """The nearest recorded call, and whether it was recorded before HTTP keys held request
    headers (it has no ``headers`` member): then the call is compared without its
    ``headers`` and ``identity``, or every such recording would differ in both."""
    http = type(target) is dict and "method" in target and "headers" in target
    if not http or all(type(c) is dict and "headers" in c for _, c in cands):
        return nearest(target, cands), False
    bare = {k: v for k, v in target.items() if k not in ("headers", "identity")}
    keyed = [type(c) is dict and "headers" in c for _, c in cands]
    near = nearest(target, [kc for kc, h in zip(cands, keyed, strict=True) if h])
    old = nearest(bare, [kc for kc, h in zip(cands, keyed, strict=True) if not h])
    if old is None or (near is not None
                       and distance(near[1], target) <= distance(old[1], bare)):
        return near, False
    return old, True


async def areplay_miss(eff: Effective, name: str, key: str, canonical: bytes) -> ReplayMiss:
    """:func:`replay_miss` for an async caller: the nearest-call search reads the store (up to
    1000 entries), in a worker thread when the store may block (SQLite)."""
    if eff.features.blocking:
        return await off_loop(replay_miss, eff, name, key, canonical)
    return replay_miss(eff, name, key, canonical)
