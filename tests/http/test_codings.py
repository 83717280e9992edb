"""A body's Content-Encoding undone for the stored copy, or found undoable (opaque)."""

from __future__ import annotations

import gzip
import zlib

import pytest
from http_support import count_decoded
from hypothesis import given
from hypothesis import strategies as st

from dejacache.http.codings import Decoding, Past, codings, decoded

TEXT = b'{"id":"chatcmpl-1","choices":[]}'
BOUND = 64 * 1024 * 1024  # the recording bound


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


@pytest.mark.parametrize(("header", "raw", "plain"), [
    ("", TEXT, TEXT),
    ("identity", TEXT, TEXT),
    ("gzip", gz(TEXT), TEXT),
    ("x-gzip", gz(TEXT), TEXT),
    ("GZip ", gz(TEXT), TEXT),
    ("deflate", zlib.compress(TEXT), TEXT),
    ("deflate", raw_deflate(TEXT), TEXT),
    # stacked: undone in reverse order of application (RFC 9110 8.4)
    ("gzip, gzip", gz(gz(TEXT)), TEXT),
    ("deflate, gzip", gz(zlib.compress(TEXT)), TEXT),
    ("gzip, identity, deflate", zlib.compress(gz(TEXT)), TEXT),
    ("gzip", b"", b""),  # nothing to undo (a HEAD answer, a 204)
    # opaque: never a partly undone body taken for plain
    ("gzip", TEXT, None),  # not what its header says
    ("gzip", gz(TEXT)[:-12], None),  # cut short
    ("gzip", gz(TEXT)[:-4], None),  # cut in its trailer: the text is all there, unchecked
    ("gzip", gz(TEXT) + b"junk", None),  # bytes after the end
    ("deflate, gzip", gz(TEXT), None),  # the inner coding is not there
    ("br, gzip", gz(b"not br"), None),  # br without brotli, or br that is not
    ("compress", TEXT, None),  # a coding nobody decodes
    ("gzip, compress", TEXT, None),
])
def test_a_whole_body_is_undone_to_its_end_or_kept_opaque(header: str, raw: bytes,
                                                          plain: bytes | None) -> None:
    assert decoded(header, raw, bound=BOUND) == plain


def test_codings_are_named_in_the_order_applied() -> None:
    assert codings("br, GZIP ,identity,") == ["br", "gzip"]
    assert codings("identity") == []


def test_a_stream_turns_opaque_at_the_chunk_that_fails_and_stays_so() -> None:
    d = Decoding("gzip", bound=BOUND)
    assert d.feed(b"data: plain\n\n") == b"" and d.opaque
    assert d.feed(gz(TEXT)) == b"" and d.finish() == b"" and d.opaque


def test_a_coding_without_a_decoder_is_opaque_from_the_start_one_cut_short_at_its_end(
        ) -> None:
    assert Decoding("compress", bound=BOUND).opaque
    cut = Decoding("gzip", bound=BOUND)
    assert cut.feed(gz(TEXT)[:-12]) and not cut.opaque
    assert cut.finish() == b"" and cut.opaque


@given(st.binary(max_size=2000),
       st.lists(st.sampled_from(["gzip", "deflate"]), min_size=1, max_size=3),
       st.integers(min_value=1, max_value=64))
def test_any_stack_in_any_chunks_undoes_to_the_body(body: bytes, layers: list[str],
                                                    size: int) -> None:
    raw = body
    for name in layers:
        raw = gz(raw) if name == "gzip" else zlib.compress(raw)
    d = Decoding(", ".join(layers), bound=BOUND)
    out = b"".join(d.feed(raw[i:i + size]) for i in range(0, len(raw), size)) + d.finish()
    assert not d.opaque and out == body


# ---------------------------------------------------------------- bounded: decompression bombs

SMALL = 64 * 1024
ZEROS = bytes(SMALL * 64)  # 4 MiB of zeros: gzip makes them 4 KB, zstd 140 bytes


def _zstd(data: bytes) -> bytes:
    return pytest.importorskip("zstandard").ZstdCompressor().compress(data)


def _br(data: bytes) -> bytes:
    brotli = pytest.importorskip("brotli")
    if not hasattr(brotli.Decompressor(), "can_accept_more_data"):
        pytest.skip("brotli < 1.2 cannot be held to a size")
    return bytes(brotli.compress(data))


ENCODERS = {"gzip": gz, "deflate": zlib.compress, "raw-deflate": raw_deflate,
            "gzip, gzip": lambda d: gz(gz(d)), "br": _br, "zstd": _zstd}


def _header(name: str) -> str:
    return "deflate" if name == "raw-deflate" else name


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    return count_decoded(monkeypatch)


@pytest.mark.parametrize("name", list(ENCODERS))
def test_a_body_that_decodes_past_the_bound_is_past_and_no_decoder_yields_much_more(
        made: list[int], name: str) -> None:
    raw = ENCODERS[name](ZEROS)
    got = decoded(_header(name), raw, bound=SMALL)
    assert isinstance(got, Past) and got.bound == SMALL
    # Never the 4 MiB: at most the bound and one read (zstd: and the block it cut across)
    assert made and max(made) <= SMALL + 3 * 128 * 1024
    assert sum(made) <= 2 * (SMALL + 3 * 128 * 1024)


@pytest.mark.parametrize("name", list(ENCODERS))
def test_a_body_at_the_bound_decodes_one_byte_more_is_past(name: str) -> None:
    body = random_text(SMALL)
    assert decoded(_header(name), ENCODERS[name](body), bound=SMALL) == body
    assert isinstance(decoded(_header(name), ENCODERS[name](body + b"x"), bound=SMALL), Past)


@pytest.mark.parametrize("size", [1, 1000, 64 * 1024])
def test_a_bomb_fed_in_chunks_is_past_from_the_chunk_that_passes_and_stays_so(
        made: list[int], size: int) -> None:
    raw = gz(ZEROS)
    d = Decoding("gzip", bound=SMALL)
    out = 0
    for i in range(0, len(raw), size):
        out += len(d.feed(raw[i:i + size]))
        if d.past:
            break
    assert d.past and not d.opaque and out <= SMALL
    assert d.feed(raw) == b"" and d.finish() == b"" and d.past
    assert max(made) <= SMALL + 1


def random_text(n: int) -> bytes:
    """Text as answers are (compressible: so every layer of a stack is smaller than it; one
    that is not, gzip over random bytes, has a layer past the bound before its plain form)."""
    import random

    return bytes(random.Random(n).choices(b"abcdefghij {}:,", k=n))


def test_every_layer_of_a_stack_is_held_to_the_bound() -> None:
    import random

    body = random.Random(3).randbytes(SMALL)  # gzip makes it a little larger
    assert len(gz(body)) > SMALL
    assert decoded("gzip", gz(body), bound=SMALL) == body
    assert isinstance(decoded("gzip, gzip", gz(gz(body)), bound=SMALL), Past)


@pytest.mark.parametrize("name", list(ENCODERS))
def test_a_large_body_within_the_default_bound_decodes_whole(name: str) -> None:
    body = random_text(1024 * 1024)  # decoders that slice their input do so by the room
    assert decoded(_header(name), ENCODERS[name](body), bound=BOUND) == body
    d = Decoding(_header(name), bound=BOUND)
    raw = ENCODERS[name](body)
    out = b"".join(d.feed(raw[i:i + 5000]) for i in range(0, len(raw), 5000)) + d.finish()
    assert out == body and not d.past and not d.opaque
