"""``dejacache proxy``'s arguments as a :class:`~._server.ProxyConfig`, every value checked
where it is read (a malformed duration, limit, ``live=`` item or upstream is a
``ConfigurationError`` naming it, before the proxy listens)."""

from __future__ import annotations

import argparse
import math
import os
import pathlib

from .._core.counts import whole_count
from ..cassettes.ageing import resolve as resolve_ageing
from ..cassettes.partial import parse_live
from ..errors import ConfigurationError
from ._connection import IDLE_TIMEOUT, READ_TIMEOUT, WRITE_TIMEOUT
from ._limits import MAX_BUFFERED, MAX_CONNECTIONS, MAX_MESSAGE, MAX_RECORDED_STREAM
from ._server import ProxyConfig
from ._sessions import SessionSpec
from .upstreams import builtin_upstreams, env_upstreams, upstream_table

__all__ = ["config_from_args", "limit_count", "timeout_seconds"]


def spec_from_args(args: argparse.Namespace, cassette: pathlib.Path, rerecord: str
                   ) -> SessionSpec:
    """The cassette settings the command line gives (``proxy`` and ``mcp-proxy`` alike)."""
    live = tuple(i.strip() for i in args.live.split(",") if i.strip()) if args.live else ()
    parse_live(live, "--live")
    resolve_ageing(args.max_age, args.on_expiry)
    if args.replay_until is not None and args.replay_until < 0:
        raise ConfigurationError(f"--replay-until {args.replay_until}: expected a count >= 0")
    return SessionSpec(cassette=cassette, mode=args.mode, strict=args.strict, live=live,
                       replay_until=args.replay_until, max_age=args.max_age,
                       on_expiry=args.on_expiry, redact=tuple(args.redact),
                       volatile=tuple(args.volatile), rerecord_hint=rerecord,
                       realtime=getattr(args, "realtime", False))


def config_from_args(args: argparse.Namespace, rerecord: str) -> ProxyConfig:
    cassette = pathlib.Path(args.cassette).absolute() if args.cassette else None
    if args.cassette_dir:
        root = pathlib.Path(args.cassette_dir).absolute()
    else:
        root = cassette.parent if cassette is not None else pathlib.Path.cwd()
    if not 0 <= args.port <= 65535:
        raise ConfigurationError(f"--port {args.port}: expected 0 (a free port) to 65535")
    return ProxyConfig(
        spec=spec_from_args(args, cassette or root / "default.json", rerecord),
        upstreams=upstream_table(args.upstream, {**builtin_upstreams(),
                                                 **env_upstreams(os.environ)}),
        cassette=cassette, cassette_dir=root,
        host=args.host, port=args.port, allow_remote=args.allow_remote,
        read_timeout=timeout_seconds("--read-timeout", args.read_timeout, READ_TIMEOUT),
        idle_timeout=timeout_seconds("--idle-timeout", args.idle_timeout, IDLE_TIMEOUT),
        write_timeout=timeout_seconds("--write-timeout", args.write_timeout, WRITE_TIMEOUT),
        max_connections=limit_count("--max-connections", args.max_connections,
                                    MAX_CONNECTIONS),
        max_buffered=limit_count("--max-buffered", args.max_buffered, MAX_BUFFERED),
        max_message=limit_count("--max-message", args.max_message, MAX_MESSAGE),
        max_recorded_stream=limit_count("--max-recorded-stream", args.max_recorded_stream,
                                        MAX_RECORDED_STREAM))


def timeout_seconds(what: str, value: object, default: float) -> float:
    """One of the proxy's timeouts, ``default`` when not given; ``what`` names it in the
    error: the flag (``--read-timeout 0: ...``) or ``dejacache.proxy()``'s argument
    (``read_timeout=0: ...``), which checks it before starting the process."""
    if value is None:
        return default
    named = _named(what)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigurationError(f"{named}{value!r}: expected a number of seconds > 0")
    if not 0 < value < math.inf:  # (nan fails too)
        raise ConfigurationError(f"{named}{value:g}: expected a number of seconds > 0")
    return float(value)


def limit_count(what: str, value: object, default: int) -> int:
    """One of the proxy's limits (``--max-connections``, ``--max-buffered``,
    ``--max-message``, ``--max-recorded-stream``: a whole number > 0), ``default`` when not
    given; ``what`` names it as :func:`timeout_seconds` does."""
    return default if value is None else whole_count(value, _named(what))


def _named(what: str) -> str:
    """How an error names the value: ``--read-timeout 0`` (a flag), ``read_timeout=0``
    (``dejacache.proxy()``'s argument)."""
    return what if what.endswith("=") else what + " "
