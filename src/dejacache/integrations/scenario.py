"""langwatch-scenario runs that record once and replay for free (``dejacache[scenario]``).

``install()`` (or ``pytest --dejacache-scenario``, ini ``dejacache_scenario = true``) wraps
the public ``scenario.run`` and ``scenario.arun`` so each run goes through its own cassette:

* **named after the scenario**: under pytest ``<test dir>/cassettes/<module>/<test name>/
  <scenario>.json`` (beside the test's own cassette), elsewhere ``cassettes/scenarios/
  <scenario>.json``, or ``<cassette_dir>/<scenario>.json`` when given. A second run of the same
  scenario in one test gets ``<scenario>-2.json``;
* **namespaced by the scenario's cache_key** (the run's ``cache_key=`` or
  ``scenario.configure(cache_key=...)``; neither: the surrounding dejacache namespace).
  ``cache_key=None`` passed explicitly to ``run`` makes that run live, as scenario's caching
  docs promise (scenario itself treats it as "use the configured key");
* **the judge's trace digest normalised**: the ``<opentelemetry_traces>`` section of the
  judge's prompt holds wall-clock timestamps, span ids and durations, so it is replaced by a
  placeholder before keying (``JudgeAgent(include_traces=False)`` does not remove it);
* **parallel runs**: ``scenario.run`` runs each scenario on its own ``ThreadPoolExecutor``;
  dejacache carries the submitting task's context into executor tasks while a block is open
  (``dejacache._threads``), so two runs in ``asyncio.gather`` each replay from their own file;
* **misses stay visible**: litellm and scenario wrap a ``ReplayMiss`` twice (``RuntimeError:
  [JudgeAgent] litellm.InternalServerError: ...``); the wrapper raises the ``ReplayMiss`` itself,
  chained to what scenario raised;
* **LangWatch reporting passes through**: scenario posts run events from a bare worker thread
  when ``LANGWATCH_API_KEY`` is set; the LangWatch host is added to ``DEJACACHE_IGNORE_HOSTS``
  while installed, so those posts are never recorded, replayed or refused.

Under pytest a scenario cassette is written when the test passes, like the test's own.

``cache(ignore=[...])`` is a drop-in for ``@scenario.cache(ignore=[...])`` built on
``dejacache.cache``: kwargs included in the key (scenario #926 drops them),
``AgentInput.thread_id`` left out, and namespaced like a run: inside one by that run's
cache_key, outside by ``scenario.configure(cache_key=...)``; with neither, by dejacache's own
namespace.

Not handled: the judge's large-trace discovery mode (``expand_trace(span_id)``, used when the
digest exceeds the judge's token threshold) asks for span ids that differ on every run, so a
run that reaches it cannot replay.
"""

from __future__ import annotations

import collections
import contextvars
import functools
import importlib
import importlib.util
import inspect
import os
import pathlib
import re
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType, TracebackType
from typing import Any

from ..cassettes.block import cassette
from ..cassettes.redact import Redactor
from ..cassettes.store import Cassette
from ..config import UNSET, Unset
from ..decorators import cache as _dc_cache
from ..errors import ConfigurationError, ReplayMiss
from ..scope import Block, current, decorate_with_block, scope

__all__ = ["JUDGE_TRACES", "cache", "install", "installed", "uninstall"]

#: The trace digest scenario's JudgeAgent puts in every prompt (timestamps, span ids, durations).
#: Greedy on purpose: from the second turn on, the digest holds the judge's own earlier llm
#: span, whose input quotes the earlier prompt with its own (JSON-escaped) closing tag, so a
#: lazy match would stop inside and leave the rest of the digest keyed.
JUDGE_TRACES = re.compile(r"(?s)<opentelemetry_traces>.*</opentelemetry_traces>")

_INSTALL_HINT = "pip install 'dejacache[scenario]'"
_UNSAFE = re.compile(r"[^a-z0-9._-]+")
_ENV_IGNORE = "DEJACACHE_IGNORE_HOSTS"
_LANGWATCH_DEFAULT = "https://app.langwatch.ai"

# The namespace the current run asked for: a str, None (a live run) or UNSET (inherit).
# Set by the run wrapper, read by ``cache``; carried into scenario's worker thread.
_NOT_IN_RUN: Any = object()
_RUN_NS: contextvars.ContextVar[Any] = contextvars.ContextVar("dejacache_scenario_run",
                                                              default=_NOT_IN_RUN)


def _scenario() -> ModuleType:
    loaded = sys.modules.get("scenario")
    if loaded is None:
        spec = importlib.util.find_spec("scenario")
        # a directory called scenario on sys.path (a tests folder) is a namespace package
        if spec is None or spec.origin is None:
            raise ConfigurationError(
                f"dejacache.integrations.scenario needs langwatch-scenario: {_INSTALL_HINT}")
    try:
        scenario = importlib.import_module("scenario")
    except ImportError as exc:
        raise ConfigurationError(
            f"dejacache.integrations.scenario needs langwatch-scenario: {_INSTALL_HINT}"
        ) from exc
    if not callable(getattr(scenario, "run", None)) or not hasattr(scenario, "JudgeAgent"):
        raise ConfigurationError(
            f"the importable 'scenario' package ({getattr(scenario, '__file__', '?')}) is not "
            f"langwatch-scenario: {_INSTALL_HINT}")
    return scenario


# ------------------------------------------------------------------ install / uninstall


class _Options:
    def __init__(self, cassette_dir: str | os.PathLike[str] | None, mode: str | None,
                 volatile: Iterable[str | re.Pattern[str]],
                 redact: Iterable[str | re.Pattern[str]] | None) -> None:
        self.cassette_dir = pathlib.Path(cassette_dir) if cassette_dir is not None else None
        self.mode = mode
        self.volatile: tuple[str | re.Pattern[str], ...] = (JUDGE_TRACES, *volatile)
        self.redact = tuple(redact) if redact is not None else None


_LOCK = threading.Lock()
_OPTIONS: _Options | None = None
# (module, attribute) -> (the original, our wrapper)
_PATCHES: dict[tuple[ModuleType, str], tuple[Any, Any]] = {}
_ENV_BEFORE: str | Unset | None = UNSET


def install(
    *,
    cassette_dir: str | os.PathLike[str] | None = None,
    mode: str | None = None,
    volatile: Iterable[str | re.Pattern[str]] = (),
    redact: Iterable[str | re.Pattern[str]] | None = None,
) -> None:
    """Record and replay every ``scenario.run``/``scenario.arun`` (see the module docstring).

    Idempotent: a second call only replaces the options. ``mode`` overrides the usual default
    (``configure(mode=)``, ``DEJACACHE_MODE``, ``replay`` under ``CI``, else ``auto``; under
    pytest ``--dejacache-mode`` and the marker win); ``volatile`` adds field names, dotted
    paths or compiled regexes to the judge-trace pattern (a path none of a run's requests
    matched is named in a ``DejacacheWarning`` when the run ends); ``redact`` as for
    ``cassette``.
    """
    global _OPTIONS, _ENV_BEFORE
    sc = _scenario()
    opts = _Options(cassette_dir, mode, volatile, redact)
    if mode is not None:
        from ..config import resolve_mode

        opts.mode = resolve_mode(mode)
    if redact is not None:
        Redactor.from_spec(opts.redact, None)  # a bad spec fails here, not inside a run
    executor = sys.modules.get("scenario.scenario_executor")
    with _LOCK:
        _OPTIONS = opts
        for module in (sc, executor):
            if module is None:
                continue
            for attr in ("run", "arun"):
                original = getattr(module, attr, None)
                if original is None or (module, attr) in _PATCHES:
                    continue
                wrapper = _wrap_run(original)
                setattr(module, attr, wrapper)
                _PATCHES[(module, attr)] = (original, wrapper)
        if isinstance(_ENV_BEFORE, Unset):
            _ENV_BEFORE = os.environ.get(_ENV_IGNORE)
            host = urllib.parse.urlsplit(
                os.environ.get("LANGWATCH_ENDPOINT") or _LANGWATCH_DEFAULT).hostname
            if host:
                hosts = [h for h in (_ENV_BEFORE or "").split(",") if h.strip()]
                if host not in hosts:
                    os.environ[_ENV_IGNORE] = ",".join([*hosts, host])


def uninstall() -> None:
    """Put ``scenario.run``/``arun`` back (a no-op when not installed). An attribute somebody
    else replaced after ``install()`` is left alone."""
    global _OPTIONS, _ENV_BEFORE
    with _LOCK:
        for (module, attr), (original, wrapper) in list(_PATCHES.items()):
            if getattr(module, attr, None) is wrapper:
                setattr(module, attr, original)
            del _PATCHES[(module, attr)]
        _OPTIONS = None
        if not isinstance(_ENV_BEFORE, Unset):
            if _ENV_BEFORE is None:
                os.environ.pop(_ENV_IGNORE, None)
            else:
                os.environ[_ENV_IGNORE] = _ENV_BEFORE
            _ENV_BEFORE = UNSET


def installed() -> bool:
    return _OPTIONS is not None


# ------------------------------------------------------------------ one run


class _Plan:
    __slots__ = ("block", "live", "namespace")

    def __init__(self, namespace: Any, block: cassette | None) -> None:
        self.namespace = namespace
        self.block = block
        self.live = block is None


def _slug(name: str) -> str:
    s = _UNSAFE.sub("-", name.strip().lower()).strip("-.") or "scenario"
    if len(s) > 80:
        import xxhash

        s = s[:60].rstrip("-.") + "-" + xxhash.xxh3_64_hexdigest(name.encode())
    return s


class _Names:
    """Which file the next run of a scenario gets: the n-th run of one name in one test is
    ``<name>-n.json``; outside tests only runs open at the same time are told apart."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # The pytest item itself, not its node id: the same test run again (a second
        # session in one process) starts counting anew.
        self.test: object | None = None
        self.per_test: collections.Counter[str] = collections.Counter()
        self.open: collections.Counter[pathlib.Path] = collections.Counter()

    def pick(self, directory: pathlib.Path, slug: str, test: object | None) -> pathlib.Path:
        with self.lock:
            if test is not None:
                if test is not self.test:
                    self.test, self.per_test = test, collections.Counter()
                self.per_test[slug] += 1
                n = self.per_test[slug]
                return directory / (f"{slug}.json" if n == 1 else f"{slug}-{n}.json")
            n = 1
            while True:
                path = directory / (f"{slug}.json" if n == 1 else f"{slug}-{n}.json")
                if not self.open[path]:
                    self.open[path] += 1
                    return path
                n += 1

    def release(self, path: pathlib.Path) -> None:
        with self.lock:
            self.open[path] -= 1
            if self.open[path] <= 0:
                del self.open[path]


_NAMES = _Names()


def _configured_cache_key(sc: ModuleType) -> str | None:
    """``scenario.configure(cache_key=...)``. It replaces the class attribute
    ``ScenarioConfig.default_config`` on every call; ``scenario.default_config`` is a copy taken
    when scenario was imported, so it never sees a later ``configure``."""
    cfg = getattr(getattr(sc, "ScenarioConfig", None), "default_config", None)
    key = getattr(cfg, "cache_key", None)
    return key if isinstance(key, str) else None


def _plan(opts: _Options, args: Mapping[str, Any]) -> tuple[_Plan, Any]:
    """The block a run goes through, and the pytest item it belongs to (or None)."""
    if "cache_key" in args and args["cache_key"] is None:
        return _Plan(None, None), None
    key = args.get("cache_key")
    if not isinstance(key, str):
        key = _configured_cache_key(_scenario())
    namespace: str | Unset = key if key is not None else UNSET
    slug = _slug(str(args.get("name") or "scenario"))
    plugin = sys.modules.get("dejacache.pytest_plugin")
    item = plugin.current_test() if plugin is not None else None
    if item is not None:
        assert plugin is not None
        settings = plugin.integration_settings(item)
        base = pathlib.Path(str(item.path)).parent
        directory = (base / opts.cassette_dir if opts.cassette_dir is not None
                     else settings["cassette_dir"])
        path = _NAMES.pick(directory, slug, item)
        mode = settings["mode"] or opts.mode
        hint = settings["rerecord_hint"]
    else:
        directory = opts.cassette_dir if opts.cassette_dir is not None else (
            pathlib.Path("cassettes") / "scenarios")
        path = _NAMES.pick(directory, slug, None)
        mode = opts.mode
        hint = f"DEJACACHE_MODE=record <your command>  (re-records {path})"
    block = cassette(path, mode, redact=opts.redact, cache_key=namespace, rerecord_hint=hint,
                     shared=opts.cassette_dir is not None, volatile=opts.volatile)
    return _Plan(namespace, block), item


def _wrap_run(original: Callable[..., Any]) -> Callable[..., Any]:
    sig = inspect.signature(original)

    @functools.wraps(original)
    async def run(*args: Any, **kwargs: Any) -> Any:
        opts = _OPTIONS
        if opts is None:  # uninstalled while someone kept a reference to the wrapper
            return await original(*args, **kwargs)
        bound = sig.bind(*args, **kwargs)
        plan, item = _plan(opts, bound.arguments)
        token = _RUN_NS.set(plan.namespace)
        try:
            if plan.block is None:
                with scope(cache_key=None):
                    return await original(*args, **kwargs)
            return await _through(plan.block, item, original, args, kwargs)
        finally:
            _RUN_NS.reset(token)

    run.__dejacache_wrapped__ = original  # type: ignore[attr-defined]
    return run


async def _through(block: cassette, item: Any, original: Callable[..., Any],
                   args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if item is not None:
        plugin = sys.modules["dejacache.pytest_plugin"]
        prune = bool(plugin.integration_settings(item)["prune"])
        outcome: list[bool] = []

        def finish(tape: Cassette, ok: bool) -> None:
            outcome.append(ok)

        def at_teardown(tape: Cassette, passed: bool) -> None:
            try:
                if passed and outcome and outcome[0]:
                    tape.save(prune=prune)
                    lost = tape.unstored_error()  # (as a block's exit raises it)
                    if lost is not None:
                        raise lost
            finally:
                tape.close()

        block.defer_save = finish
    tape = block.__enter__()
    if item is not None:
        plugin.adopt_tape(item, tape, functools.partial(at_teardown, tape))
    try:
        result = await original(*args, **kwargs)
    except BaseException as exc:
        block.__exit__(type(exc), exc, exc.__traceback__)
        miss = _first_miss(tape)
        # (cancellation and interpreter exits propagate as they are)
        if miss is not None and isinstance(exc, Exception) and not isinstance(exc, ReplayMiss):
            raise _surface(miss, exc) from exc
        raise
    finally:
        if item is None:
            _NAMES.release(block.path)
    miss = _first_miss(tape)
    if miss is not None:
        # Scenario (or an agent) swallowed the miss and carried on: the run is not a replay of
        # the recording, so its result must not pass for one.
        block.__exit__(type(miss), miss, None)
        raise _surface(miss, None)
    block.__exit__(None, None, None)
    return result


def _first_miss(tape: Cassette) -> ReplayMiss | None:
    misses = getattr(tape, "misses", None)
    return misses[0] if misses else None


def _surface(miss: ReplayMiss, wrapped: BaseException | None) -> ReplayMiss:
    how = (f"scenario raised {type(wrapped).__name__}: {str(wrapped)[:200]}"
           if wrapped is not None else "the run swallowed it and went on")
    return ReplayMiss(f"{miss}\n\n(this replay miss is why the scenario run failed; {how})",
                      name=miss.name, key=miss.key, source=miss.source, diff=miss.diff)


# ------------------------------------------------------------------ @cache drop-in


def _run_namespace() -> Any:
    """The namespace the drop-in keys by: the current run's cache_key (str, or None for a
    run made live), outside a run the configured one, else UNSET (dejacache's own)."""
    ns = _RUN_NS.get()
    if ns is not _NOT_IN_RUN:
        return ns
    executor = _running_executor()
    if executor is not None:
        key = getattr(getattr(executor, "config", None), "cache_key", None)
    else:
        sc = sys.modules.get("scenario")  # never imported: nothing configured it
        key = _configured_cache_key(sc) if sc is not None else None
    return key if isinstance(key, str) else UNSET


def _running_executor() -> Any:
    """The scenario run this call is part of (a run without ``install()``), or None.

    scenario sets ``scenario.cache.context_scenario`` when a run starts and never resets it:
    ``arun`` runs in the caller's task, so after it returns the variable still names the
    finished run. A run whose finished event went out (``_finished_emitted``) is over."""
    module = sys.modules.get("scenario.cache")
    var = getattr(module, "context_scenario", None) if module is not None else None
    executor = var.get(None) if var is not None else None
    if executor is None or getattr(executor, "_finished_emitted", False) is True:
        return None
    return executor


_ENTERED: contextvars.ContextVar[tuple[scope | None, ...]] = contextvars.ContextVar(
    "dejacache_scenario_cache", default=())


class _RunNamespace(Block[None]):
    """Enter ``scope(cache_key=<the run's key>)`` around each call, when that differs from
    the namespace already in force."""

    def __enter__(self) -> None:
        ns = _run_namespace()
        s = None
        if not isinstance(ns, Unset) and ns != current().namespace:
            s = scope(cache_key=ns)
            s.__enter__()
        _ENTERED.set((*_ENTERED.get(), s))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        stack = _ENTERED.get()
        if not stack:
            return
        _ENTERED.set(stack[:-1])
        if stack[-1] is not None:
            stack[-1].__exit__(exc_type, exc, tb)


def cache(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    ignore: Iterable[str] = (),
    volatile: Iterable[str] = (),
    name: str | None = None,
    ttl: float | None = None,
) -> Any:
    """Drop-in for ``@scenario.cache(ignore=[...])`` (see the module docstring).

    Inside a scenario run the key's namespace is the run's cache_key (a run with
    ``cache_key=None`` under ``install()`` is live); outside a run it is the one
    ``scenario.configure(cache_key=...)`` set; with neither, whatever dejacache has in force
    (``configure``/``scope``/a cassette). The store is dejacache's as usual.
    """
    ignore = tuple(ignore)
    extra = ("thread_id", *volatile)

    def deco(f: Callable[..., Any]) -> Any:
        cached = _dc_cache(ignore=ignore, volatile=extra, name=name, ttl=ttl)(f)
        wrapped = decorate_with_block(_RunNamespace(), cached)
        for attr in ("cache_key", "explain", "cache_name"):
            if hasattr(cached, attr):
                setattr(wrapped, attr, getattr(cached, attr))
        return wrapped

    return deco(fn) if fn is not None else deco
