"""The proxy's control endpoint: a test runner opens and closes a cassette per test.

``/_dejacache`` speaks JSON::

    GET  /_dejacache                          what the proxy serves (version, upstreams,
                                              default cassette and mode, open sessions)
    POST /_dejacache/sessions                 open a session: {"cassette": "NAME", "mode",
                                              "strict", "live", "replay_until", "max_age",
                                              "on_expiry", "rerecord", "upstreams", "realtime"}
                                              -> 201 {"id", "url", "cassette", "mode"}
    POST /_dejacache/sessions/ID/close        {"ok": true|false, "expect_misses": false} ->
                                              what the session did (saved, replayed,
                                              recorded, missed, misses..., and "failure":
                                              why a passing test fails after all, or null)
    POST /_dejacache/sessions/ID/upstreams    {"NAME": "URL"}: routes for this session only

A session's requests go to ``/_dejacache/s/ID/<upstream>/<rest>`` (its ``url``), or carry
``x-dejacache-session: ID``. The cassette is written on close only with ``"ok": true``, the
test passed: a failing test never overwrites a good recording.

Every field is checked, and an unknown field is refused: a misspelt ``"stirct"`` must not
turn into a silent non-strict replay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from ..cassettes.partial import parse_live
from ..config import resolve_mode
from ..errors import DejacacheError
from ._sessions import SessionSpec, cassette_under
from .upstreams import Upstream, parse_upstream

if TYPE_CHECKING:
    from ._server import ProxyServer

__all__ = ["PREFIX", "SESSION_PREFIX", "control"]

PREFIX = "/_dejacache"
SESSION_PREFIX = PREFIX + "/s/"

_FIELDS: Mapping[str, type | tuple[type, ...]] = {
    "cassette": str, "mode": str, "strict": bool, "live": (list, str), "replay_until": int,
    "max_age": (str, int, float), "on_expiry": str, "rerecord": str, "upstreams": dict,
    "realtime": bool,
}


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _body(raw: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError as exc:
        raise _Refused(400, f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _Refused(400, "the body must be a JSON object")
    return data


def _routes(data: Mapping[str, Any], where: str) -> tuple[tuple[str, Upstream], ...]:
    out = []
    for name, url in data.items():
        if not isinstance(url, str):
            raise _Refused(400, f"{where}: the URL of {name!r} must be a string")
        up = parse_upstream(f"{name}={url}", where)
        out.append((up.name, up))
    return tuple(out)


def session_spec(server: ProxyServer, data: Mapping[str, Any]) -> SessionSpec:
    """A session's settings from a request body, over the proxy's own defaults."""
    for key, value in data.items():
        want = _FIELDS.get(key)
        if want is None:
            raise _Refused(400, f"unknown field {key!r}; expected some of "
                                f"{', '.join(sorted(_FIELDS))}")
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise _Refused(400, f"field {key!r} has the wrong type ({type(value).__name__})")
    name = data.get("cassette")
    if not isinstance(name, str):
        raise _Refused(400, "a session needs \"cassette\": its file, under the proxy's "
                            "cassette directory")
    base = server.config.spec
    live = data.get("live")
    if live is not None:
        parse_live(live, "live")
    return dataclasses.replace(
        base,
        cassette=cassette_under(server.config.cassette_dir, name),
        mode=resolve_mode(data["mode"]) if "mode" in data else base.mode,
        strict=data.get("strict", base.strict),
        live=tuple(live.split(",") if isinstance(live, str) else live) if live else base.live,
        replay_until=data.get("replay_until", base.replay_until),
        max_age=str(data["max_age"]) if "max_age" in data else base.max_age,
        on_expiry=data.get("on_expiry", base.on_expiry),
        rerecord_hint=data.get("rerecord") or base.rerecord_hint,
        realtime=data.get("realtime", base.realtime),
        upstreams=_routes(data.get("upstreams") or {}, "upstreams"),
    )


async def control(server: ProxyServer, method: str, path: str, raw: bytes
                  ) -> tuple[int, Any]:
    """(status, JSON) answering a request to the control endpoint."""
    try:
        return await _route(server, method, path.rstrip("/"), raw)
    except _Refused as exc:
        return exc.status, _error(str(exc))
    except DejacacheError as exc:  # a malformed setting, a damaged or busy cassette
        return (409 if "already open" in str(exc) else 400), _error(str(exc))


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": f"dejacache proxy: {message}",
                      "type": "dejacache_bad_request"}}


async def _route(server: ProxyServer, method: str, path: str, raw: bytes
                 ) -> tuple[int, Any]:
    parts = path[len(PREFIX):].strip("/").split("/") if path != PREFIX else []
    if not parts:
        if method != "GET":
            raise _Refused(405, f"{PREFIX} answers GET")
        return 200, server.status()
    if parts[0] != "sessions" or len(parts) > 3 or method != "POST":
        raise _Refused(404, f"no control endpoint {method} {path}; see GET {PREFIX}")
    data = _body(raw)
    if len(parts) == 1:
        session = await server.sessions.open(session_spec(server, data))
        return 201, {"id": session.id, "url": f"{server.url}{SESSION_PREFIX}{session.id}",
                     "cassette": str(session.spec.cassette), "mode": session.mode}
    found = server.sessions.find(parts[1])
    if found is None or len(parts) != 3:
        raise _Refused(404, f"no open session {parts[1]!r}")
    session = found
    if parts[2] == "close":
        ok, expected = data.get("ok", False), data.get("expect_misses", False)
        if not isinstance(ok, bool) or not isinstance(expected, bool) \
                or set(data) - {"ok", "expect_misses"}:
            raise _Refused(400, "close takes {\"ok\": true|false}: whether the test passed "
                                "(and \"expect_misses\": true|false)")
        return 200, await server.sessions.close(session.id, ok, expect_misses=expected)
    if parts[2] == "upstreams":
        session.upstreams.update(_routes(data, "upstreams"))
        return 200, {"id": session.id, "upstreams": {k: v.url for k, v in
                                                       session.upstreams.items()}}
    raise _Refused(404, f"no control endpoint {method} {path}; see GET {PREFIX}")
