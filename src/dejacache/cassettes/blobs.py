"""Large payloads stored once by content hash, in a folder beside the cassette.

Audio chunks, images, file uploads and big tool outputs would make a cassette as large as
the media it carries, and a test suite that sends the same audio in two tests would carry it
twice. A string of an entry that is a payload (:func:`is_payload`: base64 text or a
``data:`` URL of at least :data:`MIN_PAYLOAD` characters, or any text of at least
:data:`MIN_TEXT`) is written once to ``blobs/<h[:2]>/<h>`` beside the cassette, ``h`` the
xxh3-128 of its UTF-8 bytes, and the entry holds the string ``"@ref:blob:<h>"`` in its
place. Every cassette in one folder shares its ``blobs``: the same payload in two tests is
one file.

A blob holds exactly the bytes of the string it replaces: base64 stays base64. Decoding it
when written and encoding it again on every replay cost about as much as reading the file
(a 4.8 KB audio chunk: 16 µs to encode, 25 µs to read, on the 2-core box of the benchmarks),
and replay should cost what reading the folder costs; the file is a third larger.

Format: the marker is a value reference (``format.REF``) that no value is stored under, so a
dejacache without blobs refuses such a file ("dangling value reference") instead of serving
the marker as the recorded text; files without blobs are unchanged. The writer writes every
blob (each fsynced, then renamed into place) before the cassette that refers to it, so a
crash leaves at worst a blob nothing refers to, never a reference without its blob. A blob is
checked against its name each time it is read: a missing or altered one is a
``CassetteError`` naming it, never a replayed answer. ``dejacache verify`` checks every
blob a cassette uses and ``--fix`` removes the blobs no cassette of the folder uses.

Redaction happens before a payload is cut out (the writer redacts the entry first), and a
replay restores ``substitute=`` placeholders after the blob is read back, so both see the
text of a text blob; ``dejacache scan`` reads the text blobs a cassette uses with it.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import orjson
import xxhash

from .._lazy import pattern
from ..errors import CassetteError
from . import format as fmt

__all__ = ["BASE64", "BLOB", "FOLDER", "GRACE", "HEX", "MARK", "MIN_PAYLOAD", "MIN_TEXT",
           "Folder", "Sink", "answers_in", "blob_of", "blobs_in", "is_payload", "refers",
           "sink_for", "spliced", "used_by", "weight"]

#: The folder beside a cassette that holds its blobs.
FOLDER: Final = "blobs"
#: The reference an entry holds in place of a payload: ``MARK + hash``.
MARK: Final = fmt.BLOB_REF
BLOB: Final = fmt.BLOB
_MARK_BYTES: Final = fmt.BLOB_REF_BYTES
#: Base64 and ``data:`` URLs of at least this many characters are stored as blobs: 20 ms of
#: 24 kHz PCM16 audio (what realtime clients commonly send per message) is 1,280.
MIN_PAYLOAD: Final = 1024
#: Any other text of at least this many characters (a tool's output, a document) too.
MIN_TEXT: Final = 64 * 1024
# Compiled when first used: a replay over a file without blobs never reads them.
#: A blob's name (its hash)
HEX = pattern(r"[0-9a-f]{32}")
#: Base64 text, in either alphabet
BASE64 = pattern(r"[A-Za-z0-9+/]+={0,2}|[A-Za-z0-9_-]+={0,2}")
_DATA_URL = pattern(r"data:[\w.+-]+/[\w.+-]+(?:;[\w.+-]+=[\w.+-]+)*;base64,")
# Seconds a blob nothing refers to is kept by ``--fix``: a save under way writes its blobs
# before its cassette, and for that moment they look unreferenced.
GRACE: Final = 300.0


def blob_of(ref: str) -> str | None:
    """The hash of a reference's target (the text after ``@ref:``) when it names a blob."""
    if ref.startswith("blob:") and HEX.fullmatch(ref, 5):
        return ref[5:]
    return None


def is_payload(s: str, min_payload: int = MIN_PAYLOAD, min_text: int = MIN_TEXT) -> bool:
    """Whether ``s`` is stored as a blob: base64 text or a ``data:`` URL of at least
    ``min_payload`` characters, or any text of at least ``min_text``."""
    n = len(s)
    if n < min_payload:
        return False
    if n >= min_text:
        return True
    if s.startswith("data:"):
        m = _DATA_URL.match(s)
        return m is not None and BASE64.fullmatch(s, m.end()) is not None
    return n % 4 == 0 and BASE64.fullmatch(s) is not None


def blob_hash(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


class Sink:
    """Collects the payloads of the entries a writer packs (``pack.Packer``), until the
    writer stores them (:meth:`Folder.store`) before it writes the cassette."""

    __slots__ = ("min_payload", "min_text", "pending")

    def __init__(self, min_payload: int = MIN_PAYLOAD, min_text: int = MIN_TEXT) -> None:
        self.min_payload = min_payload
        self.min_text = max(min_text, min_payload)
        self.pending: dict[str, bytes] = {}

    def take(self, s: str) -> str | None:
        """The reference standing for ``s`` when it is a payload (kept until stored), else
        None (it stays in the entry)."""
        if not is_payload(s, self.min_payload, self.min_text):
            return None
        try:
            data = s.encode()
        except UnicodeEncodeError:  # a lone surrogate: kept in the entry, as JSON allows
            return None
        h = blob_hash(data)
        self.pending.setdefault(h, data)
        return MARK + h


def sink_for(blobs: bool | int) -> Sink | None:
    """The sink a cassette's ``blobs=`` asks for: True the default threshold, a number of
    characters another one, False (or 0) none (every payload stays in the file)."""
    if blobs is True:
        return Sink()
    if blobs is False or blobs is None:
        return None
    if type(blobs) is not int or blobs < 0:
        from ..errors import ConfigurationError

        raise ConfigurationError(f"cassette(blobs=...) takes True, False or a number of "
                                 f"characters, not {blobs!r}")
    return Sink(blobs) if blobs else None


class Folder:
    """A ``blobs`` folder (``root``); ``cassette``: the file whose reads errors name."""

    __slots__ = ("_dir", "cassette", "root")

    def __init__(self, root: pathlib.Path, cassette: pathlib.Path | None = None) -> None:
        self.root = root
        self.cassette = cassette if cassette is not None else root
        # read() joins strings: see there. With its separator: a blob's path is two
        # concatenations (os.path.join was ~100 opcodes a blob).
        self._dir = os.path.join(os.fspath(root), "")

    @classmethod
    def beside(cls, cassette: pathlib.Path) -> Folder:
        """The folder of the cassette at ``cassette``."""
        return cls(cassette.parent / FOLDER, cassette)

    def path(self, h: str) -> pathlib.Path:
        return self.root / h[:2] / h

    def read(self, h: str) -> bytes:
        """Blob ``h``'s bytes, checked against its name. The path is joined as a string: two
        ``pathlib`` joins and the conversion back were ~7 µs a blob, 40% of reading a voice
        session's 120 answer blobs warm (2.7 -> 1.7 ms)."""
        p = self._dir + h[:2] + os.sep + h
        try:
            with open(p, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            raise CassetteError(f"blob {h} is missing ({p} does not exist): re-record the "
                                "cassette, or restore the blobs folder beside it",
                                path=self.cassette) from None
        except OSError as exc:
            raise CassetteError(f"cannot read blob {h}: {exc}", path=self.cassette) from None
        if blob_hash(data) != h:
            raise CassetteError(f"blob {h} does not match its hash ({p} was altered): "
                                "re-record the cassette, or restore the file",
                                path=self.cassette)
        return data

    def resolve(self, ref: str) -> str:
        """The payload a reference's target (``blob:<hash>``) names."""
        h = blob_of(ref)
        if h is None:
            raise CassetteError(f"not a blob reference: {fmt.REF}{ref}", path=self.cassette)
        return self.text(h)

    def text(self, h: str) -> str:
        """The string blob ``h`` stands for."""
        try:
            return self.read(h).decode()
        except UnicodeDecodeError:  # hashed as written, yet not what a writer writes
            raise CassetteError(f"blob {h} is not UTF-8 text", path=self.cassette) from None

    def prefetch(self, hashes: Iterable[str]) -> None:
        """Have the kernel start reading these blobs into the page cache (``posix_fadvise``
        ``WILLNEED``), so a replay that reads them one by one later finds them there. A
        voice session's 120 answer blobs, out of the page cache, took 19-26 ms read one
        after another; asked for at once on open, 2-5 ms, and then 2-7 ms to read (the disk
        serves them together while the replay works). Warm, 0.5-0.9 ms for the 120. Does
        nothing where the call does not exist (macOS, Windows) or a blob is missing (the
        read names it)."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None:
            return
        root, sep = self._dir, os.sep
        for h in hashes:
            try:
                fd = os.open(root + h[:2] + sep + h, os.O_RDONLY)
            except OSError:
                continue
            try:
                advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    def store(self, pending: dict[str, bytes]) -> None:
        """Write the ``pending`` blobs the folder lacks, each durable before this returns
        (the cassette referring to them is written after). A file already there is kept
        when it checks out, and written again when it does not."""
        written: dict[pathlib.Path, pathlib.Path] = {}  # shard -> a blob written there
        for h, data in pending.items():
            p = self.path(h)
            if _holds(p, h):
                continue
            if p.parent not in written:
                p.parent.mkdir(parents=True, exist_ok=True)
            _write(p, data)
            written[p.parent] = p
        for p in written.values():
            fmt.sync_dir(p)  # its rename (and its shard's others) durable
        for shard in written:
            fmt.sync_dir(shard)  # the shard's own entry in the folder
        if written:
            fmt.sync_dir(self.root)  # the folder's entry beside the cassette

    def hashes(self) -> Iterator[str]:
        """Every blob in the folder (by its file name)."""
        if not self.root.is_dir():
            return
        for shard in sorted(self.root.iterdir()):
            if shard.is_dir() and len(shard.name) == 2:
                for f in sorted(shard.iterdir()):
                    if HEX.fullmatch(f.name) and f.name[:2] == shard.name:
                        yield f.name

    def remove(self, h: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(h).unlink()


def _holds(p: pathlib.Path, h: str) -> bool:
    try:
        with open(p, "rb") as fh:
            return blob_hash(fh.read()) == h
    except OSError:
        return False


def _write(p: pathlib.Path, data: bytes) -> None:
    tmp = p.parent / f".{p.name}.{os.urandom(8).hex()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CassetteError(f"cannot write blob {p.name} in {p.parent}: "
                            f"{exc.strerror or exc}", path=p) from None


# ---------------------------------------------------------------- what a file refers to


def blobs_in(tree: Any, out: set[str]) -> None:
    """Collect the blob hashes ``tree`` refers to directly."""
    fmt.strings_in(tree, _blob_ref, out)


def _blob_ref(s: str) -> str | None:
    return blob_of(s[len(fmt.REF):]) if s.startswith(MARK) else None


def used_by(doc: dict[str, Any]) -> set[str]:
    """The blobs a parsed cassette document refers to (its entries and shared values)."""
    out: set[str] = set()
    for e in doc.get("entries", ()):
        if isinstance(e, dict):
            blobs_in(e.get("request"), out)
            blobs_in(e.get("response"), out)
    for v in doc.get("values", {}).values():
        blobs_in(v, out)
    return out


refers = fmt.refers_blobs  #: whether a cassette's bytes refer to any blob


_QUOTED_MARK: Final = b'"' + _MARK_BYTES
_HEX_BYTES = pattern(rb"[0-9a-f]{32}")
_BLANK: Final = b" \t\r\n"


def spliced(body: bytes, text: Callable[[str], Any]) -> bytes | None:
    """``body``, the JSON bytes of an answer, with each blob reference written as the JSON
    string of its payload (``text(hash)``), unparsed; None when it may hold any other
    reference, or a reference anywhere but as a whole string value (not a member name),
    which only parsing and :func:`format.unpack` expand exactly.

    A voice session's answer of 20 audio chunks (22 KB with references, 138 KB expanded)
    was parsed, walked and written again at ~0.5 ms beside 0.37 ms of reading its blobs;
    here it is searched and joined. A reference's opening quote is one no backslash
    escapes (an even run before it): a quote closing a string is never followed by ``@``
    in JSON."""
    parts: list[bytes] = []
    n, done, at = 0, 0, body.find(_QUOTED_MARK)
    size, end = len(_QUOTED_MARK), len(body)
    while at >= 0:
        h_at = at + size
        close = h_at + 32
        k = at
        while k and body[k - 1] == 0x5C:  # backslash
            k -= 1
        if (at - k) % 2 or body[close:close + 1] != b'"' or not _HEX_BYTES.fullmatch(
                body, h_at, close):
            return None  # inside a string, or a longer string: not one whole reference
        j = close + 1
        while j < end and body[j] in _BLANK:
            j += 1
        if body[j:j + 1] == b":":
            return None  # a member name: kept as written
        parts.append(body[done:at])
        parts.append(orjson.dumps(text(body[h_at:close].decode("ascii"))))
        done = close + 1
        n += 1
        at = body.find(_QUOTED_MARK, done)
    if body.count(fmt.REF_BYTES) != n:
        return None  # a shared value's reference (or text that looks like one)
    parts.append(body[done:])
    return b"".join(parts)


# Where a written file's entries open their request or their answer (sorted keys, at the
# entries' indent): what tells the blobs a replay reads from those it only keys.
_ENTRY_KEY: Final = b'\n      "re'
_ANSWER_KEY: Final = b'sponse": '


def answers_in(data: fmt.Buffer) -> list[str]:
    """The blobs the entries' answers refer to, in file order (what a replay reads; the
    requests' payloads are keyed, never read). Found by the layout the writer gives every
    entry: a hint for :meth:`Folder.prefetch`, never a check (a file laid out otherwise
    yields fewer, or other, hashes; each blob is still checked when it is read). Each
    stretch between two references is searched once, backwards (~1.4 ms for a voice
    session's 556 KB file and its 732 references). A memory-mapped file (``format``: 1 MB
    and more) is not searched: that would read every page a replay may never touch."""
    out: list[str] = []
    if type(data) is not bytes:
        return out
    seen: set[str] = set()
    find, rfind = data.find, data.rfind
    size, key = len(_MARK_BYTES), len(_ENTRY_KEY)
    answer, last = False, 0
    at = find(_MARK_BYTES)
    while at >= 0:
        k = rfind(_ENTRY_KEY, last, at)
        if k >= 0:  # an entry's request or answer opened since the last reference
            answer = data.startswith(_ANSWER_KEY, k + key)
        if answer:
            h = data[at + size:at + size + 32].decode("ascii", "replace")
            if h not in seen and HEX.fullmatch(h):
                seen.add(h)
                out.append(h)
        last = at
        at = find(_MARK_BYTES, at + size)
    return out


def weight(data: fmt.Buffer) -> int:
    """What a cassette's bytes stand for: their length and, for each blob reference,
    :data:`MIN_PAYLOAD` (the least a default blob holds), so a file of references weighs
    like the payloads it replays. A voice session's 556 KB file refers to 4.6 MB of audio:
    parsed and checked whole on open it took ~15 ms, and every hit then walked its parsed
    entry instead of slicing its bytes (``format.EAGER_CHECK_UNDER``); opened through its
    cross-reference, its replay took 7-9% less CPU (interleaved in one process)."""
    n = len(data)
    if type(data) is bytes:  # (a memory-mapped file is past any threshold already)
        n += data.count(_MARK_BYTES) * MIN_PAYLOAD
    return n


#: ``resolve(ref)`` for ``format.unpack``: the text after ``@ref:`` -> the value.
Resolver = Callable[[str], Any]
