"""What a cassette block records of its own calls: each call made (``tape.calls``).

Apart from the views of whole cassettes (``trajectory.py``), which re-export it: a block
needs only its call records, and the views cost a first block ~3 ms of imports. The places
a run left its recording are ``findings.py``'s: a replay that follows it never builds one.
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Call", "args_of"]


class Call:
    """One call made inside a cassette block (``tape.calls``), in the order made.

    ``outcome``: ``"replayed"`` (answered from the recording), ``"recorded"`` (run live and
    stored) or ``"missed"`` (replay found no recording). ``recorded_step``: the step of the
    file that answered it. ``request`` is the call as the cassette holds it (redacted);
    ``args`` is the part a test asserts on: a function's arguments, a model call's body.
    Both are read from the file when first asked for.
    """

    __slots__ = ("_kind", "_loader", "_request", "_src", "divergence", "index", "key", "name",
                 "outcome", "raw_kind", "recorded_step")

    def __init__(self, index: int, name: str, raw_kind: str, key: str, outcome: str,
                 recorded_step: int | None, loader: Callable[[Call], Any] | None,
                 request: Any = None, src: Any = None) -> None:
        self.index = index
        self.name = name
        self.raw_kind = raw_kind
        self._kind: str | None = None  # ``kind``, found when first read (a hit rarely is)
        self.key = key
        self.outcome = outcome
        self.recorded_step = recorded_step
        self.divergence: str | None = None  # the reason, when this call diverged
        self._request = request
        self._loader = loader
        self._src = src  # what the loader reads the request from (the tape's entry)

    @property
    def kind(self) -> str:
        """The kind shown: ``model``, ``tool``, ``function`` or ``http`` (``step_kind``)."""
        kind = self._kind
        if kind is None:
            from .kinds import step_kind  # (a replay never asks: kinds.py loads when one does)

            kind = self._kind = step_kind(self.raw_kind, self.name)
        return kind

    @property
    def request(self) -> Any:
        loader = self._loader
        if loader is not None:
            self._request = loader(self)
            self._loader = self._src = None
        return self._request

    @property
    def args(self) -> Any:
        return args_of(self.kind, self.request)

    def __repr__(self) -> str:
        return (f"Call(#{self.index} {self.kind} {self.name!r}, {self.outcome}"
                + (f", step {self.recorded_step}" if self.recorded_step is not None else "")
                + ")")


def args_of(kind: str, request: Any) -> Any:
    if kind in ("model", "http") and isinstance(request, dict) and "body" in request:
        return request["body"]
    return request
