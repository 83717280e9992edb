"""The mode vocabulary and what the environment says of it, importing nothing heavy: the
pytest plugin reads them in every run, cassettes or not (``config`` and ``cassettes.block``
re-export them)."""

from __future__ import annotations

import os
from typing import Final

from .errors import ConfigurationError

__all__ = ["MODES", "VCR_MODES", "in_ci", "resolve_mode"]

MODES: Final = ("auto", "replay", "record", "off")
#: vcrpy's record modes (and pytest-recording's ``rewrite``), which the vcr surface maps.
VCR_MODES: Final = ("once", "new_episodes", "none", "all", "rewrite")


def resolve_mode(mode: str, *, where: str = "mode") -> str:
    m = mode.strip().lower()
    if m not in MODES:
        raise ConfigurationError(f"unknown {where} {mode!r}; expected one of {', '.join(MODES)}")
    return m


def in_ci() -> bool:
    v = os.environ.get("CI", "").strip().lower()
    return bool(v) and v not in ("0", "false", "no")
