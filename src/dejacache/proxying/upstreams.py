"""Where the proxy forwards ``/<NAME>/<rest>``: the upstream table, as pure rules.

Every provider module that declares where its API lives (``Provider.upstream``) is a
built-in upstream under its own name (``openai``, ``anthropic``, ``gemini``, ``bedrock``...);
``--upstream NAME=URL`` adds one or replaces a built-in one. An upstream URL may hold a path
(``http://127.0.0.1:8080/v1``): the request's rest is appended to it. Bedrock's URL names the
AWS region as ``{region}``, filled per request from the region the client signed for.

Where an SDK base URL variable is set in the proxy's environment (``OPENAI_BASE_URL``,
``ANTHROPIC_BASE_URL``: :data:`BASE_URL_ENV`), it replaces that provider's built-in URL: the
proxy stands in front of wherever the environment sent the SDKs (a gateway, Azure, a local
server), and a command it runs gets the same variables pointing at the proxy instead.

Keys leave the host out (a loopback server's port changes every run), so a request or a
WebSocket session to an upstream the user named is keyed with that name too
(:func:`keyed_headers`); one to a built-in name is the provider the request names already.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping

from ..errors import ConfigurationError
from ..http.providers import all_providers

__all__ = ["BASE_URL_ENV", "UPSTREAM", "Upstream", "builtin_upstreams", "check_url",
           "env_upstreams", "keyed_headers", "parse_upstream", "split_target",
           "unknown_upstream", "upstream_table"]

#: Upstream name -> (the SDKs' base URL variable, what their base URL adds to the
#: upstream's): ``OPENAI_BASE_URL`` is ``<upstream>/v1``.
BASE_URL_ENV = {"openai": ("OPENAI_BASE_URL", "/v1"), "anthropic": ("ANTHROPIC_BASE_URL", "")}

#: Keyed (never sent) with a request or WebSocket handshake to an upstream the user named
#: (``--upstream local=URL``): see :func:`keyed_headers`.
UPSTREAM = "x-dejacache-upstream"

_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}\Z")


@dataclasses.dataclass(frozen=True, slots=True)
class Upstream:
    name: str
    url: str  #: no trailing slash; ``{region}`` where the AWS region goes

    def base(self, region: str | None) -> str:
        """The URL with its region filled in (a ``ConfigurationError`` without one)."""
        if "{region}" not in self.url:
            return self.url
        region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            raise ConfigurationError(
                f"upstream {self.name} ({self.url}) needs an AWS region: the client's "
                "signature names none, and AWS_REGION is not set")
        return self.url.replace("{region}", region)


def builtin_upstreams() -> dict[str, Upstream]:
    """One upstream per provider module that names its API's URL."""
    return {p.name: Upstream(p.name, p.upstream) for p in all_providers()
            if p.upstream is not None}


@functools.cache
def _builtin_names() -> frozenset[str]:
    return frozenset(builtin_upstreams())


def keyed_headers(upstream: Upstream, headers: list[tuple[str, str]]
                  ) -> list[tuple[str, str]]:
    """``headers`` as a request to ``upstream`` is keyed (and recorded): with
    :data:`UPSTREAM` naming it when the user named it. Keys leave the host out, so two such
    upstreams asked the same thing would share a key, and replayed in another order each
    would be answered the other's recording. A built-in name (``openai``, even pointed
    elsewhere) is the provider the request's path names already, and keys as an in-process
    call to it does. The proxy drops any ``x-dejacache-*`` header a client sends, so a client
    cannot name another upstream's recordings."""
    if upstream.name in _builtin_names():
        return headers
    return [*headers, (UPSTREAM, upstream.name)]


def env_upstreams(environ: Mapping[str, str]) -> dict[str, Upstream]:
    """The upstreams the SDK base URL variables in ``environ`` name (see the module
    docstring); a malformed one is a ``ConfigurationError`` naming the variable."""
    out = {}
    for name, (var, suffix) in BASE_URL_ENV.items():
        value = environ.get(var, "").strip()
        if value:
            url = check_url(value, var)
            out[name] = Upstream(name, url.removesuffix(suffix) if suffix else url)
    return out


def parse_upstream(spec: str, where: str = "--upstream") -> Upstream:
    """``NAME=URL`` as an :class:`Upstream`; a ``ConfigurationError`` naming ``spec`` (and
    ``where`` it was given) when either part is malformed."""
    name, sep, url = spec.partition("=")
    name = name.strip().lower()
    if not sep or not _NAME.match(name):
        raise ConfigurationError(
            f"{where} {spec!r}: expected NAME=URL with NAME made of a-z, 0-9, '_', '.', "
            "'-' (e.g. openai=http://127.0.0.1:8080)")
    return Upstream(name, check_url(url.strip(), f"{where} {spec!r}"))


def check_url(url: str, where: str) -> str:
    """``url`` without its trailing slash, when it is an absolute http(s) URL with a host
    and nothing after its path."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query \
            or parts.fragment or "@" in parts.netloc:
        raise ConfigurationError(f"{where}: {url!r} is not an http(s) URL with a host "
                                 "(and no credentials, query or fragment)")
    return url.rstrip("/")


def upstream_table(specs: Iterable[str], base: Mapping[str, Upstream] | None = None
                   ) -> dict[str, Upstream]:
    """The built-in upstreams (or ``base``) with ``specs`` added over them."""
    table = dict(builtin_upstreams() if base is None else base)
    for spec in specs:
        up = parse_upstream(spec)
        table[up.name] = up
    return table


def split_target(target: str) -> tuple[str, str]:
    """``/openai/v1/chat?x=1`` -> ``("openai", "/v1/chat?x=1")`` (rest may be ``""``)."""
    path = target.lstrip("/")
    name, slash, rest = path.partition("/")
    name, q, query = name.partition("?")
    if q:
        return name.lower(), "?" + query
    return name.lower(), slash + rest


def unknown_upstream(name: str, table: Mapping[str, Upstream]) -> str:
    """What an unknown upstream name is answered with."""
    known = ", ".join(sorted(table)) or "none"
    shown = name if len(name) <= 64 else name[:64] + "..."
    return (f"dejacache proxy: no upstream named {shown!r}; the path's first segment names "
            f"one of: {known} (add one with --upstream NAME=URL)")
