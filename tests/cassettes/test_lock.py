"""The cassette lock: exclusive across processes, bounded, and shared with ``filelock``."""

from __future__ import annotations

import pathlib
import sys

import pytest

from dejacache.cassettes.lock import _lock_path, cassette_lock
from dejacache.errors import CassetteError

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")


def test_a_held_lock_is_waited_for_at_most_the_timeout_then_named(
        tmp_path: pathlib.Path) -> None:
    p = tmp_path / "c.json"
    # flock belongs to the open file: a second open in the same process conflicts
    with cassette_lock(p), pytest.raises(CassetteError) as info, \
            cassette_lock(p, timeout=0.05):
        pass
    assert str(p) in str(info.value) and "lock" in str(info.value)
    with cassette_lock(p, timeout=0.05):  # released: taken at once
        pass


def test_a_filelock_holder_excludes_the_fcntl_path(tmp_path: pathlib.Path) -> None:
    filelock = pytest.importorskip("filelock")
    p = tmp_path / "c.json"
    with filelock.FileLock(str(_lock_path(p))), \
            pytest.raises(CassetteError), cassette_lock(p, timeout=0.05):
        pass
