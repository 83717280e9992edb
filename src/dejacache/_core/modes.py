"""The one vocabulary of modes, and the check every place that reads a mode uses.

Imports nothing heavy: the pytest plugin reads it in every run, cassettes or not.

A project file may name a mode in vcrpy's words too (``dejacache_mode = none`` in a suite
moved from pytest-recording): :func:`project_mode` checks either vocabulary and
:func:`as_mode` turns it into dejacache's once the cassette's existence is known. vcrpy's
``none`` means ``replay`` wherever a mode is read (``DEJACACHE_MODE``, ``configure()``, a
scope, a marker, a command-line option): it needs no cassette to be known, and a
pytest-recording user's ``--record-mode=none`` is their word for replay only.
"""

from __future__ import annotations

import os

from ..errors import ConfigurationError

TYPE_CHECKING = False  # typing is not loaded by a replay hit (~12M instructions); mypy reads True
if TYPE_CHECKING:
    from typing import Final

__all__ = ["MODES", "VCR_MODES", "as_mode", "in_ci", "option_mode", "project_mode",
           "resolve_mode", "vcr_mode"]

MODES: Final = ("auto", "replay", "record", "off")
#: vcrpy's record modes, as pytest-recording's ``--record-mode`` takes them (``rewrite``:
#: pytest-recording's own, the cassette removed first).
VCR_MODES: Final = ("once", "new_episodes", "none", "all", "rewrite")


def _text(mode: object, where: str, expected: str) -> str:
    # An int or None here was a raw AttributeError from ``.strip()`` deep in the library.
    if not isinstance(mode, str):
        raise ConfigurationError(f"{where} must be a string, one of {expected}, not {mode!r}")
    return mode.strip().lower()


def resolve_mode(mode: str, *, where: str = "mode") -> str:
    """A mode in dejacache's words, or vcrpy's ``none`` (-> ``replay``)."""
    m = _text(mode, where, ", ".join(MODES))
    if m == "none":
        return "replay"
    if m not in MODES:
        raise ConfigurationError(f"unknown {where} {mode!r}; expected one of {', '.join(MODES)}"
                                 " (or vcrpy's none: replay)")
    return m


def option_mode(text: str) -> str:
    """A command-line option's mode as argparse's ``type=``: vcrpy's ``none`` as ``replay``,
    the rest left for ``choices=MODES`` to check (and refuse with the list)."""
    return "replay" if text.strip().lower() == "none" else text


def in_ci() -> bool:
    """Whether ``CI`` is set to something other than ``0``/``false``/``no``."""
    v = os.environ.get("CI", "").strip().lower()
    return bool(v) and v not in ("0", "false", "no")


def vcr_mode(name: str, exists: bool) -> str:
    """vcrpy's record mode as a dejacache mode: ``none`` -> ``replay``, ``once`` ->
    ``replay`` when the cassette exists, else ``record``, ``new_episodes`` -> ``auto``,
    ``all`` (and pytest-recording's ``rewrite``) -> ``record``."""
    if name == "none":
        return "replay"
    if name == "once":
        return "replay" if exists else "record"
    if name == "new_episodes":
        return "auto"
    if name in ("all", "rewrite"):
        return "record"
    raise ConfigurationError(f"record_mode must be one of {', '.join(VCR_MODES)} (or a "
                             f"dejacache mode: {', '.join(MODES)}), not {name!r}")


def project_mode(mode: str, *, where: str = "mode") -> str:
    """A mode as a project file writes it: dejacache's or vcrpy's name, lower-cased."""
    m = _text(mode, where, ", ".join(MODES + VCR_MODES))
    if m not in MODES and m not in VCR_MODES:
        raise ConfigurationError(f"unknown {where} {mode!r}; expected one of "
                                 f"{', '.join(MODES)} (or vcrpy's {', '.join(VCR_MODES)})")
    return m


def as_mode(mode: str, exists: bool = True) -> str:
    """A checked :func:`project_mode` as dejacache's mode (``exists``: the cassette's file
    is there, which decides vcrpy's ``once``)."""
    return mode if mode in MODES else vcr_mode(mode, exists)
