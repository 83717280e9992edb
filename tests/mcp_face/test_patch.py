"""How the transports are switched: in place, while a block is open, and never half-way."""

from __future__ import annotations

import contextlib
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest

import dejacache
from dejacache.mcp import _patch


def test_a_transport_of_another_shape_is_left_alone_with_a_warning() -> None:
    async def gen(*args: Any) -> AsyncIterator[Any]:
        yield None

    def not_a_context_manager(*args: Any) -> Any:  # names gen, but does not hold it
        return None

    not_a_context_manager.__wrapped__ = gen  # type: ignore[attr-defined]
    mod = types.ModuleType("some_transport")
    mod.stdio_client = not_a_context_manager  # type: ignore[attr-defined]
    with pytest.warns(dejacache.DejacacheWarning, match="not recorded or replayed"):
        assert _patch._patch_transport(mod, "stdio_client", "stdio") is None


def test_an_asynccontextmanager_is_switched_in_place_and_back() -> None:
    @contextlib.asynccontextmanager
    async def stdio_client(*args: Any) -> AsyncIterator[Any]:
        yield "live"

    held = stdio_client  # what a framework bound at its import
    mod = types.ModuleType("some_transport")
    mod.stdio_client = stdio_client  # type: ignore[attr-defined]
    mod.alias = stdio_client  # type: ignore[attr-defined]
    undo = _patch._patch_transport(mod, "stdio_client", "stdio")
    assert undo is not None
    assert held is mod.stdio_client  # the same object, another generator inside
    assert held.__wrapped__.__dejacache_patch__  # type: ignore[attr-defined]
    assert _patch._patch_transport(mod, "alias", "stdio") is None  # done once
    undo()
    assert not hasattr(held.__wrapped__, "__dejacache_patch__")  # type: ignore[attr-defined]


async def test_outside_a_block_a_switched_transport_is_the_transport() -> None:
    @contextlib.asynccontextmanager
    async def stdio_client(*args: Any) -> AsyncIterator[Any]:
        yield ("read", "write", *args)

    mod = types.ModuleType("some_transport")
    mod.stdio_client = stdio_client  # type: ignore[attr-defined]
    undo = _patch._patch_transport(mod, "stdio_client", "stdio")
    assert undo is not None
    try:
        async with stdio_client(1) as streams:
            assert streams == ("read", "write", 1)
    finally:
        undo()
