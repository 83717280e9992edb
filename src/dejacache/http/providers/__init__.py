"""Provider knowledge, one module per provider.

Each module defines ``PROVIDER`` (a :class:`Provider`); they are discovered here, so adding
a provider means adding one file.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping

from ._base import Provider

__all__ = ["Provider", "all_providers", "detect"]


@functools.cache
def all_providers() -> tuple[Provider, ...]:
    import pkgutil  # once, on the first request: not with the first block (issue 12, item 6)

    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        prov = getattr(mod, "PROVIDER", None)
        if isinstance(prov, Provider):
            found.append(prov)
    return tuple(sorted(found, key=lambda p: (p.priority, p.name)))


def detect(host: str, path: str, headers: Mapping[str, str]) -> Provider:
    for prov in all_providers():
        if prov.matches(host, path, headers):
            return prov
    raise AssertionError("the generic provider matches everything")  # pragma: no cover
