"""A body's Content-Encoding undone for the stored copy, or found undoable (opaque)."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dejacache.http.codings import Decoding, codings, decoded

TEXT = b'{"id":"chatcmpl-1","choices":[]}'


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
    assert decoded(header, raw) == plain


def test_codings_are_named_in_the_order_applied() -> None:
    assert codings("br, GZIP ,identity,") == ["br", "gzip"]
    assert codings("identity") == []


def test_a_stream_turns_opaque_at_the_chunk_that_fails_and_stays_so() -> None:
    d = Decoding("gzip")
    assert d.feed(b"data: plain\n\n") == b"" and d.opaque
    assert d.feed(gz(TEXT)) == b"" and d.finish() == b"" and d.opaque


def test_a_coding_without_a_decoder_is_opaque_from_the_start_one_cut_short_at_its_end(
        ) -> None:
    assert Decoding("compress").opaque
    cut = Decoding("gzip")
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
    d = Decoding(", ".join(layers))
    out = b"".join(d.feed(raw[i:i + size]) for i in range(0, len(raw), size)) + d.finish()
    assert not d.opaque and out == body
