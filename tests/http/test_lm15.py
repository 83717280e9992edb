"""How lm15's transports get wrapped (src/dejacache/http/lm15.py), without dspy.

The exchanges themselves run against dspy's real lm15 in ``.venv-fw2``
(tests/integrations/frameworks/test_dspy_lm15.py and test_dspy.py). Here a stand-in ``lm15``
package shows the import hook wraps it when it is first imported inside a block, puts it
back after, and says so when the API it knows is not there.
"""

from __future__ import annotations

import importlib
import pathlib
import sys
from collections.abc import Iterator

import pytest

import dejacache
from dejacache.http.intercept import patched_libraries

_TRANSPORTS = '''
class TransportError(Exception):
    pass


class StdlibTransport:
    def stream(self, request):
        raise TransportError("the stand-in never connects")


class StdlibAsyncTransport:
    def stream(self, request):
        raise TransportError("the stand-in never connects")
'''


@pytest.fixture
def stand_in(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    pkg = tmp_path / "lm15"
    (pkg / "transports").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    yield pkg / "transports" / "__init__.py"
    sys.path.remove(str(tmp_path))
    for name in ("lm15.transports", "lm15"):
        sys.modules.pop(name, None)


def test_imported_inside_a_block_it_is_wrapped_until_the_block_ends(
    stand_in: pathlib.Path,
) -> None:
    stand_in.write_text(_TRANSPORTS)
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()):
        import lm15.transports as lt

        assert "lm15.transports" in patched_libraries()
        for cls in (lt.StdlibTransport, lt.StdlibAsyncTransport):
            assert getattr(cls.stream, "__dejacache_patch__", False), cls
            assert cls.stream.__wrapped__ is not None
    assert "lm15.transports" not in patched_libraries()
    for cls in (lt.StdlibTransport, lt.StdlibAsyncTransport):
        assert not getattr(cls.stream, "__dejacache_patch__", False)


def test_an_lm15_without_the_known_api_is_named_not_skipped_silently(
    stand_in: pathlib.Path,
) -> None:
    stand_in.write_text(_TRANSPORTS.replace("def stream", "def send"))
    with dejacache.scope(mode="auto", store=dejacache.MemoryStore()), \
            pytest.warns(dejacache.DejacacheWarning) as caught:
        import lm15.transports  # noqa: F401
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert "lm15.transports" in messages[0] and "StdlibTransport.stream()" in messages[0]
    assert "neither recorded nor replayed" in messages[0]
    assert "StdlibAsyncTransport.stream()" in messages[1]
