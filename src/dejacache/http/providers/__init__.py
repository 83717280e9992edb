"""Provider knowledge, one module per provider.

Each module defines ``PROVIDER`` (a :class:`Provider`) and is named in ``MODULES``; adding a
provider means adding its file and its name there (``tests/http/test_http_providers.py`` fails
when the two disagree).

The modules are imported with this package, never found on the first request: that lookup
(``pkgutil.iter_modules``, an ``os.stat`` per entry) ran inside the first intercepted call, on
the event loop when the call was async, where a loop checker such as ``blockbuster`` made it
fail, and failed again on every later request because only a success was cached.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from ._base import END, FINISHING, IN_PROGRESS, Provider, int_fields, last_str

__all__ = ["END", "FINISHING", "IN_PROGRESS", "MODULES", "Provider", "all_providers", "detect",
           "int_fields", "last_str"]

#: The provider modules of this package.
MODULES = ("anthropic", "bedrock", "cohere", "gemini", "gemini_live", "generic", "groq",
           "mistral", "ollama", "openai", "openai_realtime")


def _load() -> tuple[Provider, ...]:
    found = []
    for name in MODULES:
        prov = getattr(importlib.import_module(f"{__name__}.{name}"), "PROVIDER", None)
        if not isinstance(prov, Provider):
            raise TypeError(f"{__name__}.{name} defines no PROVIDER")
        found.append(prov)
    return tuple(sorted(found, key=lambda p: (p.priority, p.name)))


_PROVIDERS = _load()


def all_providers() -> tuple[Provider, ...]:
    """Every provider, in the order requests are matched (the generic fallback last)."""
    return _PROVIDERS


def detect(host: str, path: str, headers: Mapping[str, str]) -> Provider:
    for prov in _PROVIDERS:
        if prov.matches(host, path, headers):
            found = prov.for_request(host, path)
            if found.volatile and not found.vouched(host, headers):
                return found.unvouched()
            return found
    raise AssertionError("the generic provider matches everything")  # pragma: no cover
