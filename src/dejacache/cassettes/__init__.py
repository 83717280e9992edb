"""Cassettes: per-test files of recorded calls, replayed in order (see ``block.cassette``)."""

from __future__ import annotations

from .._lazy import attach

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .block import cassette, default_mode, in_ci
    from .findings import EntryInfo
    from .redact import Redactor
    from .store import Cassette, TapeCounters

__all__ = ["Cassette", "EntryInfo", "Redactor", "TapeCounters", "cassette", "default_mode",
           "in_ci"]

# Loaded on first use, to keep imports cheap: importing one module of this package, say
# ``cassettes.format`` from the CLI, no longer loads the block, the tape and HTTP with it.
__getattr__, __dir__ = attach(__name__, {
    "Cassette": ".store", "EntryInfo": ".findings", "TapeCounters": ".store",
    "Redactor": ".redact",
    "cassette": ".block", "default_mode": ".block", "in_ci": ".block",
})
