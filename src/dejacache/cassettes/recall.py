"""Recorded steps as reports show them: a step's name, kind, key and request, read through
the open tape or, after it closed, from the file again if it still holds the recording the
tape read (the same cross-reference checksum).

Apart from tape.py because only a report reads them (a divergence, a step never made): a
replay hit never loads this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import CassetteError
from . import format as fmt
from .reader import FileIndex
from .tape import Tape, folder

if TYPE_CHECKING:
    from .findings import CallInfo

__all__ = ["request_of", "step_info"]


def step_info(tape: Tape, step: int) -> CallInfo:
    """Recorded step ``step`` as reports show it."""
    from .findings import CallInfo  # (reports only: see findings.py)
    from .kinds import step_kind
    if tape.raw is None:  # closed: names from the index, the request from the file
        ix = tape.ix
        assert ix is not None
        name, kind = ix.names()[step], ix.kinds()[step]
        return CallInfo(name, step_kind(kind, name), ix.key_at(step),
                        request_of(tape, step), step)
    doc = tape.doc(tape.entry(step))
    name = str(doc.get("name", ""))
    return CallInfo(name, step_kind(str(doc.get("kind", "call")), name),
                    str(doc.get("key", "")), tape.expand(doc.get("request")), step)


def request_of(tape: Tape, step: int) -> Any:
    """Recorded step ``step``'s request as the file holds it (redacted), expanded: read
    through the open tape, or after close from the file, if it is still the recording
    the tape read (same cross-reference checksum); otherwise None (a report shows no
    request rather than another recording's)."""
    if tape.raw is not None:
        return tape.expand(tape.doc(tape.entry(step)).get("request"))
    if tape.again is None:
        raw = fmt.read_file(tape.path) if tape.seal else None
        try:
            now = FileIndex.open(raw) if raw is not None else None
        except CassetteError:
            now = None
        if now is None or now.seal != tape.seal:
            now = None
        tape.again = (now, raw, {})
    now, _, values = tape.again
    ix = tape.ix
    if now is None or ix is None:
        return None

    def resolve(h: str) -> Any:
        if h not in values and h.startswith(fmt.BLOB):
            values[h] = folder(tape).resolve(h)
        if h not in values:
            found, v = now.value(h)
            if not found:
                raise CassetteError(f"dangling value reference {fmt.REF}{h}")
            values[h] = v
        return values[h]

    try:
        return fmt.unpack(now.entry(step, ix.key_at(step)).get("request"), resolve)
    except CassetteError:
        return None
