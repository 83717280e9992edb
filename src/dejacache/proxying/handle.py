"""``dejacache.proxy()``: the proxy for a Python test suite that drives a non-Python agent.

``with dejacache.proxy(cassette="agent.json", upstreams={"openai": url}) as p:`` starts
``dejacache proxy`` as a subprocess on a free loopback port and stops it (SIGTERM: the
cassette is written) when the block exits; ``p.url`` is its base URL, ``p.env`` the
variables that point an agent's SDKs at it. ``p.session(path)`` opens a cassette of its own
(one per test: the pytest fixture ``dejacache_proxy`` does this), written when the session
closes cleanly.

A subprocess rather than a thread: the proxy's cassette blocks would otherwise be open in the
test's own process, where they would route its worker threads and patch its transports.
Control calls to the proxy are let through a replay block's connection guard.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

import orjson

from ..errors import CassetteError, ConfigurationError

__all__ = ["ProxyProcess", "ProxySession", "proxy"]


@contextlib.contextmanager
def _handed_on() -> Iterator[None]:
    """Around a control call: a replay block open in this process would refuse an HTTP
    connection that did not go through interception (only when interception is loaded can
    such a block be open)."""
    transport = sys.modules.get("dejacache.http.transport")
    if transport is None:
        yield
        return
    with transport.handing_on():
        yield


def _call(url: str, data: Mapping[str, Any] | None = None, timeout: float = 60.0) -> Any:
    body = orjson.dumps(data) if data is not None else None
    req = urllib.request.Request(url, data=body, method="POST" if data is not None else "GET",
                                 headers={"content-type": "application/json"})
    with _handed_on():
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return orjson.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = orjson.loads(exc.read() or b"{}").get("error", {}).get("message", "")
            raise ConfigurationError(detail or f"{url}: HTTP {exc.code}") from None


def _env(base: str, proxy_url: str, mode: str) -> dict[str, str]:
    """What points an agent's SDKs at ``base``; replaying, the API keys this process lacks
    are placeholders (the SDKs refuse to start without one; a replay never sends them)."""
    from ..cassettes.placeholder_keys import KEY_VARIABLES, PLACEHOLDER

    env = {"DEJACACHE_PROXY": proxy_url, "OPENAI_BASE_URL": f"{base}/openai/v1",
           "ANTHROPIC_BASE_URL": f"{base}/anthropic"}
    if mode == "replay":
        env.update({k: PLACEHOLDER for k in KEY_VARIABLES if not os.environ.get(k)})
    return env


class ProxySession:
    """A cassette open on a running proxy: its requests go to :attr:`url`."""

    def __init__(self, process: ProxyProcess, info: Mapping[str, Any]) -> None:
        self.process = process
        self.id: str = info["id"]
        self.url: str = info["url"]
        self.cassette = pathlib.Path(info["cassette"])
        self.mode: str = info["mode"]
        self.summary: dict[str, Any] | None = None

    def base_url(self, upstream: str) -> str:
        """Where an SDK for ``upstream`` points (``base_url("openai") + "/v1"``)."""
        return f"{self.url}/{upstream}"

    @property
    def env(self) -> dict[str, str]:
        """``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL`` and ``DEJACACHE_PROXY`` for an agent
        run as a subprocess: the SDKs that read them go through this session."""
        return _env(self.url, self.process.url, self.mode)

    def route(self, upstream: str, url: str) -> None:
        """Send this session's ``upstream`` requests to ``url`` (a loopback fake, say)."""
        _call(f"{self.process.url}/_dejacache/sessions/{self.id}/upstreams", {upstream: url})

    def close(self, ok: bool = True, *, expect_misses: bool = False) -> dict[str, Any]:
        """End the session; the cassette is written only when ``ok``. What it did: counts,
        ``misses`` and ``divergences`` (their reports), ``saved``. Closing twice is a
        no-op.

        With ``ok`` (the test passed), a ``CassetteError`` naming the cassette when the
        session did not hold: its save failed, a strict session's recorded calls were not
        all made, or a request missed (unless ``expect_misses``; the agent behind the proxy
        may have swallowed the error it was answered)."""
        if self.summary is None:
            self.summary = _call(f"{self.process.url}/_dejacache/sessions/{self.id}/close",
                                 {"ok": ok, "expect_misses": expect_misses})
            if self.summary.get("failure"):
                raise CassetteError(self.summary["failure"])
        return self.summary

    def __enter__(self) -> ProxySession:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(ok=exc_type is None)


class ProxyProcess:
    """A running ``dejacache proxy`` (see :func:`proxy`)."""

    def __init__(self, argv: list[str], *, timeout: float,
                 env: Mapping[str, str] | None = None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="dejacache-proxy-")
        ready = pathlib.Path(self._dir.name) / "ready"
        self._stderr = open(pathlib.Path(self._dir.name) / "stderr", "w+b")  # noqa: SIM115
        self.returncode: int | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dejacache", "proxy", *argv, "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
            env=dict(env) if env is not None else None)
        try:
            self.url = self._wait(ready, timeout)
            self.mode: str = _call(f"{self.url}/_dejacache")["mode"]
        except BaseException:
            self.close()
            raise

    def _wait(self, ready: pathlib.Path, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready.exists():
                text = ready.read_text(encoding="utf-8").strip()
                if text:
                    return text
            if self.proc.poll() is not None:
                raise ConfigurationError(f"dejacache proxy did not start: {self._errors()}")
            time.sleep(0.02)
        raise ConfigurationError(f"dejacache proxy was not ready within {timeout} s")

    def _errors(self) -> str:
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit status {self.proc.returncode}"

    @property
    def env(self) -> dict[str, str]:
        """The variables that point an agent's SDKs at the default cassette."""
        return _env(self.url, self.url, self.mode)

    def base_url(self, upstream: str) -> str:
        return f"{self.url}/{upstream}"

    def session(self, cassette: str | os.PathLike[str], *, mode: str | None = None,
                strict: bool = False, live: Iterable[str] | None = None,
                replay_until: int | None = None, max_age: str | None = None,
                on_expiry: str | None = None, upstreams: Mapping[str, str] | None = None,
                rerecord: str | None = None) -> ProxySession:
        """Open ``cassette`` (under the proxy's cassette directory) as a session: the
        arguments are ``dejacache.cassette``'s; ``upstreams`` routes this session's
        requests; ``rerecord`` is the command a miss report says re-records it."""
        data: dict[str, Any] = {"cassette": os.fspath(cassette), "strict": strict}
        for key, value in (("mode", mode), ("replay_until", replay_until),
                           ("max_age", max_age), ("on_expiry", on_expiry),
                           ("rerecord", rerecord)):
            if value is not None:
                data[key] = value
        if live is not None:
            data["live"] = list(live)
        if upstreams:
            data["upstreams"] = dict(upstreams)
        return ProxySession(self, _call(f"{self.url}/_dejacache/sessions", data))

    def close(self) -> int:
        """Stop the proxy (its default cassette is written) and wait; its exit status. Its
        summary and warnings go to this process's stderr."""
        if self.returncode is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.returncode = self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.returncode = self.proc.wait()
            self._stderr.seek(0)
            sys.stderr.write(self._stderr.read().decode(errors="replace"))
            self._stderr.close()
            self._dir.cleanup()
        return self.returncode

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        status = self.close()
        if status != 0 and exc[0] is None:
            raise ConfigurationError(f"dejacache proxy exited with status {status}")


def proxy(
    cassette: str | os.PathLike[str] | None = None,
    *,
    mode: str | None = None,
    upstreams: Mapping[str, str] | None = None,
    cassette_dir: str | os.PathLike[str] | None = None,
    strict: bool = False,
    live: Iterable[str] | None = None,
    replay_until: int | None = None,
    max_age: str | None = None,
    port: int = 0,
    timeout: float = 60.0,
    env: Mapping[str, str] | None = None,
    read_timeout: float | None = None,
    idle_timeout: float | None = None,
    write_timeout: float | None = None,
    max_connections: int | None = None,
    max_buffered: int | None = None,
    max_message: int | None = None,
    max_recorded_stream: int | None = None,
) -> ProxyProcess:
    """Start ``dejacache proxy`` (see the module docstring); use it as a context manager.

    ``cassette``: where requests to :attr:`ProxyProcess.url` are recorded and replayed
    (optional when only sessions are used); ``upstreams``: ``{"openai": URL}`` added over
    the built-in ones; ``env``: the proxy's whole environment (default: this process's;
    where ``CI`` and ``DEJACACHE_MODE`` choose its default mode and AWS credentials are
    found); ``timeout``: seconds to wait for it to start; ``read_timeout``,
    ``idle_timeout``, ``write_timeout``: the connection timeouts of its ``--read-timeout``,
    ``--idle-timeout`` and ``--write-timeout`` (seconds; default 30, 75 and 60);
    ``max_connections``, ``max_buffered``, ``max_message``: its ``--max-connections``
    (default 256), ``--max-buffered`` (bytes of request bodies held at once; default 1 GiB)
    and ``--max-message`` (bytes of one WebSocket message; default 64 MiB);
    ``max_recorded_stream``: its ``--max-recorded-stream`` (bytes one live answer's
    recording may hold, a stream's or a download's: past it the answer is passed on as it
    arrives and not recorded; default 64 MiB); the other
    arguments are ``dejacache.cassette``'s."""
    # (checked here: a bad value never starts one)
    from ._config import limit_count, timeout_seconds

    argv: list[str] = ["--port", str(port)]
    for name, given in (("read_timeout", read_timeout), ("idle_timeout", idle_timeout),
                        ("write_timeout", write_timeout)):
        if given is not None:
            argv += ["--" + name.replace("_", "-"), repr(timeout_seconds(name + "=", given, 0))]
    for name, count in (("max_connections", max_connections), ("max_buffered", max_buffered),
                        ("max_message", max_message),
                        ("max_recorded_stream", max_recorded_stream)):
        if count is not None:
            argv += ["--" + name.replace("_", "-"), str(limit_count(name + "=", count, 0))]
    if cassette is not None:
        argv += ["--cassette", os.fspath(cassette)]
    if cassette_dir is not None:
        argv += ["--cassette-dir", os.fspath(cassette_dir)]
    for flag, value in (("--mode", mode), ("--replay-until", replay_until),
                        ("--max-age", max_age)):
        if value is not None:
            argv += [flag, str(value)]
    if strict:
        argv.append("--strict")
    if live:
        argv += ["--live", ",".join(live)]
    for name, url in (upstreams or {}).items():
        argv += ["--upstream", f"{name}={url}"]
    return ProxyProcess(argv, timeout=timeout, env=env)
