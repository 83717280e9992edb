"""Provider modules: every one listed, and imported with the package."""

from __future__ import annotations

import pkgutil

from dejacache.http import providers


def test_every_provider_module_is_listed() -> None:
    found = {m.name for m in pkgutil.iter_modules(providers.__path__)
             if not m.name.startswith("_")}
    assert found == set(providers.MODULES)
    assert [p.name for p in providers.all_providers()][-1] == "http"  # the fallback is last
