"""The tests of ``dejacache.mcp``: the ticket-desk server of tests/mcp_support, recorded and
replayed. (Not ``tests/mcp``: on the test path that directory would pass for the ``mcp``
package in a venv without it, and litellm imports ``mcp`` when it finds one.)

The server's modules live in tests/mcp_support (its own tests use them with no dejacache
involved): they are put on the path here, and its fixtures (``mcp_stdio``, ``mcp_http``,
``mcp_sse``, ``mcp_ledger``, each skipping without mcp 2) shared.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

SUPPORT = pathlib.Path(__file__).resolve().parents[1] / "mcp_support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

_spec = importlib.util.spec_from_file_location("mcp_support_conftest", SUPPORT / "conftest.py")
assert _spec is not None and _spec.loader is not None
_support = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_support)

mcp_ledger = _support.mcp_ledger
mcp_stdio = _support.mcp_stdio
mcp_http = _support.mcp_http
mcp_sse = _support.mcp_sse
