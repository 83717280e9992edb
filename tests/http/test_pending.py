"""A request not built yet (``http/_pending.py``): what keying reads is at hand, the library's
request is built once, when asked for, and a built request passes through as it is."""

from __future__ import annotations

import asyncio

from dejacache.http._pending import Pending, built


def test_a_pending_request_is_built_once_when_asked_for() -> None:
    made: list[object] = []

    def build() -> object:
        made.append(object())
        return made[-1]

    p = Pending("POST", "http://127.0.0.1:9/v1/x", b"{}", build)
    assert asyncio.run(p.aread()) == b"{}" and (p.method, p.content) == ("POST", b"{}")
    assert made == []  # keying reads it without building it
    first = built(p)
    assert built(p) is first and made == [first]
    assert built(first) is first  # a library request is itself
