"""Executor tasks carry their submitter's block, without a block loading the executor
(``dejacache._threads``: importing ``concurrent.futures.thread`` was part of every
cold cassette open). Each check runs in a fresh interpreter, where nothing has loaded the
executor's module yet."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _run(code: str) -> object:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


_PRELUDE = """
import asyncio, json, sys
import dejacache
from dejacache import _threads
from dejacache.scope import current

MOD = "concurrent.futures.thread"

def where():
    return current().namespace
"""


def test_a_block_does_not_load_the_executor_and_patches_it_when_loaded_inside() -> None:
    got = _run(_PRELUDE + textwrap.dedent("""
        out = {}
        with dejacache.scope(cache_key="outer"):
            out["loaded_by_block"] = MOD in sys.modules
            out["armed"] = _threads.patched()
            from concurrent.futures import ThreadPoolExecutor  # loaded here, inside the block
            with ThreadPoolExecutor(2) as pool:
                out["task"] = pool.submit(where).result(10)
            out["patched"] = _threads.patched()
        out["after"] = _threads.patched()
        out["restored"] = ThreadPoolExecutor.submit.__module__ == MOD
        with ThreadPoolExecutor(1) as pool:
            out["outside"] = pool.submit(where).result(10) == where()  # no block here
        print(json.dumps(out))
    """))
    assert got == {"loaded_by_block": False, "armed": True, "task": "outer", "patched": True,
                   "after": False, "restored": True, "outside": True}


def test_asyncio_default_executor_created_inside_a_block_carries_it() -> None:
    # run_in_executor(None, ...) creates the loop's ThreadPoolExecutor, loading its module
    got = _run(_PRELUDE + textwrap.dedent("""
        async def main():
            with dejacache.scope(cache_key="in-loop"):
                assert MOD not in sys.modules
                return await asyncio.get_running_loop().run_in_executor(None, where)
        print(json.dumps(asyncio.run(main())))
    """))
    assert got == "in-loop"


def test_loaded_between_blocks_it_is_patched_by_the_next_block_only() -> None:
    got = _run(_PRELUDE + textwrap.dedent("""
        with dejacache.scope(cache_key="first"):
            pass  # arms the import hook, loads nothing
        from concurrent.futures import ThreadPoolExecutor  # outside any block: left alone
        out = [_threads.patched(), ThreadPoolExecutor.submit.__module__ == MOD]
        with dejacache.scope(cache_key="second"), ThreadPoolExecutor(1) as pool:
            out += [_threads.patched(), pool.submit(where).result(10)]
        out.append(_threads.patched())
        print(json.dumps(out))
    """))
    assert got == [False, True, True, "second", False]
