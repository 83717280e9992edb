"""What the fake tests share below the SDKs: the raw wire."""

from __future__ import annotations

from typing import Any

import urllib3

__all__ = ["raw_chunks", "sent_headers"]


def raw_chunks(url: str, body: Any, headers: dict[str, str] | None = None) -> list[bytes]:
    """POST ``body`` and return the answer's HTTP chunks as they came off the wire: what a
    stream's framing looks like below any SDK."""
    with urllib3.PoolManager() as pool:
        resp = pool.request("POST", url, json=body, headers=headers, preload_content=False)
        assert resp.status == 200, resp.data
        try:
            return list(resp.read_chunked())
        finally:
            resp.release_conn()


def sent_headers(request: dict[str, Any]) -> dict[str, str]:
    """A logged request's headers by lower-case name (each SDK spells them its own way)."""
    return {k.lower(): v for k, v in request["headers"].items()}
