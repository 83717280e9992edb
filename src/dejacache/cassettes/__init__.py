"""Cassettes: per-test files of recorded calls, replayed in order (see ``block.cassette``)."""

from __future__ import annotations

from .block import cassette, default_mode, in_ci
from .redact import Redactor
from .store import Cassette, EntryInfo, TapeCounters

__all__ = ["Cassette", "EntryInfo", "Redactor", "TapeCounters", "cassette", "default_mode",
           "in_ci"]
