"""The public surface: one sorted __all__, every name real, no optional extra needed."""

from __future__ import annotations

import json
import subprocess
import sys

import dejacache

OPTIONAL = ("redis", "httpx", "httpx2", "openai", "anthropic", "pydantic", "rich",
            "prometheus_client", "filelock")


def test_all_is_sorted_and_unique() -> None:
    assert dejacache.__all__ == sorted(dejacache.__all__)
    assert len(set(dejacache.__all__)) == len(dejacache.__all__)


def test_every_exported_name_exists() -> None:
    missing = [n for n in dejacache.__all__ if not hasattr(dejacache, n)]
    assert missing == []


def test_core_names_are_exported() -> None:
    for name in ("cache", "configure", "scope", "propagate", "wrap_executor", "explain",
                 "call_key", "stats", "reset_stats", "MemoryStore", "SQLiteStore", "Store",
                 "JsonCodec", "PickleCodec", "ReplayMiss", "UnhashableArgument",
                 "SerializationError", "IntegrityError", "DejacacheWarning", "__version__"):
        assert name in dejacache.__all__, name


def test_trajectory_api_is_exported() -> None:
    for name in ("load_cassette", "diff_cassettes", "ReplayDivergence"):
        assert name in dejacache.__all__, name
    assert issubclass(dejacache.ReplayDivergence, dejacache.ReplayMiss)
    assert issubclass(dejacache.ReplayDivergence, AssertionError)


def test_stores_importable_from_both_places() -> None:
    from dejacache import stores

    assert stores.MemoryStore is dejacache.MemoryStore
    assert stores.SQLiteStore is dejacache.SQLiteStore


_BLOCKER = """
import importlib.abc, json, sys
BLOCKED = set(sys.argv[1].split(","))

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by test)", name=name)
        return None

sys.meta_path.insert(0, Block())
import dejacache

@dejacache.cache
def f(x):
    return {"x": x}

dejacache.configure(store=dejacache.MemoryStore())
assert f(1) == f(1) == {"x": 1}
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & BLOCKED)))
"""


def test_import_works_without_optional_extras() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKER, ",".join(OPTIONAL)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_plain_import_loads_no_optional_module() -> None:
    code = (
        "import json, sys, dejacache;"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({OPTIONAL!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert json.loads(out.stdout) == []
