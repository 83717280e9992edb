"""``dejacache mcp-proxy`` (being written)."""

from __future__ import annotations

import argparse

__all__ = ["run_mcp_proxy"]


def run_mcp_proxy(args: argparse.Namespace, command: list[str], rerecord: str) -> int:
    raise NotImplementedError
