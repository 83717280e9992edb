"""Warnings raised beside a live stream while its caller reads it, raised again at its end.

Recording a stream, storing it once complete and telling the observers about it all run
inside the caller's iteration, between two chunks. A warning there is said at once; but
under ``python -W error`` or pytest's ``filterwarnings = error`` it is an exception, and
raised there it ended the caller's stream half-way: the rest of an answer the caller paid
for was lost (a stream past its recording bound stopped at the event that passed it). So a
warning that is raised as an error beside a stream is caught and kept here, and raised when
the caller has every chunk: at the end of the stream or at its close, whichever comes first.
Every stream path keeps its warnings through this one class: the recording (httpx and
httpx2 sync and async, and through them aiohttp, urllib3, requests, botocore's eventstreams
and the SDKs' stream wrappers) and the observers' tee.
"""

from __future__ import annotations

__all__ = ["Deferred"]


class Deferred:
    """The warnings one stream's side work raised as errors, until :meth:`raise_kept`.

    ``with deferred:`` around that work keeps such a warning instead of raising it (what
    the work did before it stands, as for any exception); it adds no frame, so a warning
    said there names the same line it did."""

    __slots__ = ("kept",)

    def __init__(self) -> None:
        self.kept: list[Warning] = []

    def __enter__(self) -> Deferred:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, Warning):
            self.kept.append(exc)
            return True
        return False

    def raise_kept(self) -> None:
        """Raise the first warning kept (once), the others' messages noted on it: the
        filter that made one an error would have stopped at it."""
        if not self.kept:
            return
        first, *rest = self.kept
        del self.kept[:]
        for w in rest:
            first.add_note(f"(also: {type(w).__name__}: {w})")
        raise first
