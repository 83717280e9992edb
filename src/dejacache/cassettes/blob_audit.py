"""The blobs a cassette uses, looked at: what each one is (``show``, the report, ``scan``)
and whether they check out (``verify``).

Apart from ``blobs.py``, which a replay loads: these two frozen dataclasses and the media
sniffing cost a first block ~1.5 ms of imports that no replay uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Final

from ..errors import CassetteError
from . import format as fmt
from .blobs import BASE64, GRACE, HEX, MARK, Folder, blob_hash, refers, used_by
from .document import load_document

__all__ = ["BlobInfo", "Checked", "check", "describe", "hints_in", "is_text", "kind_of",
           "unused"]


def is_text(data: bytes) -> bool:
    """Whether a blob is text (a tool's output) rather than an encoded payload: what
    ``scan`` reads."""
    head = data[:96].decode("ascii", errors="replace")
    return not head.startswith("data:") and _b64_head(head) is None



# ---------------------------------------------------------------- what a blob is


@dataclasses.dataclass(frozen=True, slots=True)
class BlobInfo:
    """One blob a cassette uses, as ``show`` and the report list them."""

    hash: str
    size: int  # bytes on disk (-1: missing)
    kind: str  # a media type, sniffed from the content
    steps: tuple[int, ...] = ()  # the entries that use it


_MAGIC: Final = (
    (b"RIFF", 8, b"WAVE", "audio/wav"), (b"RIFF", 8, b"WEBP", "image/webp"),
    (b"\x89PNG", 0, b"", "image/png"), (b"\xff\xd8\xff", 0, b"", "image/jpeg"),
    (b"GIF8", 0, b"", "image/gif"), (b"OggS", 0, b"", "audio/ogg"),
    (b"fLaC", 0, b"", "audio/flac"), (b"ID3", 0, b"", "audio/mpeg"),
    (b"%PDF", 0, b"", "application/pdf"), (b"PK\x03\x04", 0, b"", "application/zip"),
)


def kind_of(head: bytes, hint: str = "") -> str:
    """The media type of a blob from its first bytes: what a ``data:`` URL declares, else
    the type the decoded content's magic number names, else ``hint`` for base64 without
    one (the ``mimeType`` beside it, or ``audio`` from the field it sat in), else
    ``text/plain`` or ``application/octet-stream``."""
    text = head.decode("ascii", errors="replace")
    if text.startswith("data:"):
        return text[5:].partition(";")[0].partition(",")[0] or "application/octet-stream"
    raw = _b64_head(text)
    if raw is not None:
        for magic, at, more, kind in _MAGIC:
            if raw.startswith(magic) and raw[at : at + len(more)] == more:
                return kind + " (base64)"
        return (hint or "application/octet-stream") + " (base64)"
    return hint or "text/plain"


def _b64_head(text: str) -> bytes | None:
    import base64
    import binascii

    cut = text[: len(text) - len(text) % 4][:64]
    if len(cut) < 8 or BASE64.fullmatch(cut) is None:
        return None
    try:
        return base64.b64decode(cut.replace("-", "+").replace("_", "/"))
    except (binascii.Error, ValueError):
        return None


def describe(folder: Folder, hashes: Iterable[str], hints: dict[str, str],
             steps: dict[str, list[int]]) -> list[BlobInfo]:
    """``hashes`` as ``BlobInfo``, largest first (a missing blob: size -1)."""
    out = []
    for h in hashes:
        p = folder.path(h)
        try:
            with open(p, "rb") as fh:
                head = fh.read(96)
            size = p.stat().st_size
            kind = kind_of(head, hints.get(h, ""))
        except OSError:
            size, kind = -1, "missing"
        out.append(BlobInfo(h, size, kind, tuple(steps.get(h, ()))))
    return sorted(out, key=lambda b: (-b.size, b.hash))


def hints_in(tree: Any, out: dict[str, str], context: str = "") -> None:
    """For each blob ``tree`` refers to, what its surroundings say it is: a ``mimeType`` /
    ``mime_type`` / ``content_type`` beside it, or ``audio`` when its field or event is
    about audio."""
    t = type(tree)
    if t is dict:
        declared = next((tree[k] for k in ("mimeType", "mime_type", "content_type")
                         if type(tree.get(k)) is str), None)
        kind = tree.get("type")
        here = declared or (context if type(kind) is not str or "audio" not in kind
                            else "audio")
        for k, v in tree.items():
            sub = here or ("audio" if "audio" in k else "")
            if type(v) is str and v.startswith(MARK):
                h = v[len(MARK):]
                if HEX.fullmatch(h) and sub:
                    out.setdefault(h, sub.partition(";")[0])
            else:
                hints_in(v, out, sub)
    elif t is list:
        for v in tree:
            hints_in(v, out, context)



# ---------------------------------------------------------------- verify


@dataclasses.dataclass(frozen=True, slots=True)
class Checked:
    """The blobs one cassette uses, checked: how many, their bytes, and the bad ones."""

    count: int
    size: int
    missing: tuple[str, ...]
    altered: tuple[str, ...]


def check(folder: Folder, hashes: Iterable[str]) -> Checked:
    """Every blob of ``hashes`` read and checked against its name."""
    size, missing, altered = 0, [], []
    hs = sorted(hashes)
    for h in hs:
        p = folder.path(h)
        try:
            with open(p, "rb") as fh:
                data = fh.read()
        except OSError:
            missing.append(h)
            continue
        size += len(data)
        if blob_hash(data) != h:
            altered.append(h)
    return Checked(len(hs), size, tuple(missing), tuple(altered))


def unused(folder: Folder, now: float) -> tuple[list[str], str]:
    """The blobs of ``folder`` no cassette beside it refers to, older than ``GRACE``; or
    ``([], why)`` when that cannot be told (a cassette there does not parse: never removed
    in doubt)."""
    used: set[str] = set()
    for f in sorted(folder.root.parent.glob("*.json")):
        data = fmt.read_file(f)
        if data is None or not refers(data):
            continue
        try:
            used |= used_by(load_document(fmt.whole(data), f, verify=False))
        except CassetteError:
            return [], f"not judged: {f.name} cannot be read"
    out = []
    for h in folder.hashes():
        if h in used:
            continue
        try:
            if now - folder.path(h).stat().st_mtime < GRACE:
                continue  # a save under way writes its blobs before its cassette
        except OSError:
            continue
        out.append(h)
    return out, ""
