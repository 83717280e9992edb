"""aiohttp.ClientSession: placeholder until its seam lands."""

from __future__ import annotations

from typing import Any

MODULES: tuple[str, ...] = ()


def patch(module: Any) -> list[tuple[type, str, Any]]:
    return []
