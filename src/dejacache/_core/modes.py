"""The one vocabulary of modes, and the check every place that reads a mode uses."""

from __future__ import annotations

from typing import Final

from ..errors import ConfigurationError

__all__ = ["MODES", "resolve_mode"]

MODES: Final = ("auto", "replay", "record", "off")


def resolve_mode(mode: str, *, where: str = "mode") -> str:
    m = mode.strip().lower()
    if m not in MODES:
        raise ConfigurationError(f"unknown {where} {mode!r}; expected one of {', '.join(MODES)}")
    return m
