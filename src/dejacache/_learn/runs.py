"""The test runs ``dejacache learn`` makes: pytest in a child process, recording every call
live into a scratch directory (``cassettes/scratch.py``), or replaying the project's own
cassettes to collect the rules its misses suggest.

A learning run's default store (``@cache`` outside cassettes) is the scratch directory's
too, so cached functions run live as well, and the project's usage record and caches are
left alone. ``--upstream NAME=URL`` sends a provider's calls elsewhere for these runs by the
environment variable its SDK reads (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``...).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence

from ..cassettes import scratch
from ..errors import ConfigurationError

__all__ = ["cassettes_of", "parse_upstreams", "run_tests"]

# pytest's exit statuses that mean the run itself went wrong, not a test: interrupted,
# internal error, usage error, no tests collected.
BROKEN = frozenset({2, 3, 4, 5})


def parse_upstreams(items: Sequence[str]) -> dict[str, str]:
    """``NAME=URL`` items as the environment variables the runs get."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or not name.strip() or not url.strip():
            raise ConfigurationError(f"--upstream {item!r}: write NAME=URL, e.g. "
                                     "openai=http://127.0.0.1:8000/v1")
        var = "".join(c if c.isalnum() else "_" for c in name.strip()).upper() + "_BASE_URL"
        out[var] = url.strip()
    return out


def run_tests(pytest_args: Sequence[str], *, learn_dir: pathlib.Path | None, mode: str,
              env: Mapping[str, str] | None = None) -> int:
    """pytest with ``pytest_args`` in ``mode``; ``learn_dir``: record into it (a learning
    run). Its output goes to ours; returns its exit status."""
    child = dict(os.environ)
    child.update(env or {})
    child["DEJACACHE_MODE"] = mode
    child.pop(scratch.ENV, None)
    if learn_dir is not None:
        learn_dir.mkdir(parents=True, exist_ok=True)
        child[scratch.ENV] = str(learn_dir)
        child["DEJACACHE_DIR"] = str(learn_dir / ".dejacache")
    cmd = [sys.executable, "-m", "pytest", f"--dejacache-mode={mode}", *pytest_args]
    print("running:", " ".join(cmd), flush=True)
    return subprocess.call(cmd, env=child)


def cassettes_of(directory: pathlib.Path) -> Iterator[pathlib.Path]:
    """The cassettes a learning run wrote, by their place under ``directory``."""
    for p in sorted(directory.rglob("*.json")):
        rel = p.relative_to(directory)
        if rel.parts[0] != ".dejacache":
            yield rel
