"""Fallback for any other HTTP API: named by host, nothing volatile, usage if present."""

from __future__ import annotations

from collections.abc import Mapping

from ._base import Provider

__all__ = ["PROVIDER", "Generic"]


class Generic(Provider):
    name = "http"
    priority = 1000
    # Generic APIs give no promise that an "id" is fed back; aliasing them would only add
    # work, so nothing is aliased unless a provider module says so.
    alias_keys = frozenset()

    def matches(self, host: str, path: str, headers: Mapping[str, str]) -> bool:
        return True

    def endpoint(self, host: str, path: str) -> str:
        # The host without its port: a loopback test server gets a new port on every run.
        return f"http.{host or 'local'}"


PROVIDER = Generic()
