"""Read-only places for tests, even when the suite runs as root (where chmod stops nothing)."""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import subprocess
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def immutable(*paths: pathlib.Path) -> Iterator[None]:
    """Make paths immutable (``chattr +i``): read-only even for root, which chmod is not."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not available")
    done: list[pathlib.Path] = []
    try:
        for p in paths:
            r = subprocess.run(["chattr", "+i", str(p)], capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"chattr +i is not supported here: {r.stderr.strip()}")
            done.append(p)
        probe = paths[0] / "probe" if paths[0].is_dir() else paths[0]
        try:
            probe.open("ab").close()
        except OSError:
            pass
        else:
            pytest.skip("immutable attribute does not stop writes on this filesystem")
        yield
    finally:
        for p in reversed(done):
            subprocess.run(["chattr", "-i", str(p)], check=True)
