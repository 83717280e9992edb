"""Who is told of cassette blocks opening and of recordings an interruption discarded.

Kept apart from ``block.py`` so the pytest plugin can listen without importing the cassette
machinery in a run that never opens a block (``block.py`` re-exports both lists).
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Any

    from .store import Cassette

__all__ = ["DISCARDED", "INTERRUPTIONS", "OPENED"]

#: What stops a block without it having failed: the run was cut short, so the block writes
#: nothing of it, even with ``record_on_error=True``.
INTERRUPTIONS: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit)

#: Told of each block entered and the tape it opened (before the tape reads the file): the
#: pytest plugin's record of which cassettes a run used (``usage.py``), including blocks a
#: test opens by hand. Changed once per session, never per call.
OPENED: list[Callable[[Any, Cassette], None]] = []

#: Told of each interrupted block that had recorded calls, with the tape and a sentence
#: saying what was not written (the pytest plugin's summary). Changed once per session.
DISCARDED: list[Callable[[Cassette, str], None]] = []
