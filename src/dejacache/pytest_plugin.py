"""pytest plugin (registered through the ``pytest11`` entry point).

* fixture ``dejacache_cassette``: the test's calls go to ``<test dir>/cassettes/<module>/
  <test name>.json``; written only when the test passes. An interrupted test (Ctrl-C,
  ``pytest.exit()``, ``SystemExit``) writes nothing, even with ``record_on_error=True``, and
  the summary names the calls it discarded.
* marker ``@pytest.mark.dejacache(cassette=..., mode=..., cache_key=..., redact=..., volatile=...,
  substitute=..., record_errors=..., record_on_error=..., prune=..., allow_hosts=...,
  expect_misses=..., match=...)``: same, without naming the fixture. A test that passes
  although the code under test caught a replay miss fails, unless it says
  ``expect_misses=True``. ``match="vcr"``: calls are matched on method + URL in recorded
  order, as vcrpy does (``cassettes/vcr_match.py``). An argument the marker does not take
  (``cassete=``, ``strcit=``) is a usage error naming the closest one.
* fixture ``dejacache_proxy``: the same cassette, open on a ``dejacache proxy`` the session
  runs, for a test that drives a non-Python agent as a subprocess: give it ``.env`` (or point
  its SDK at ``.url``); the proxy's upstreams come from the ``dejacache_proxy_upstreams`` ini
  option or ``.route(name, url)``.
* pytest-recording's surface when no other plugin has a ``vcr`` fixture (``_pytest_vcr.py``):
  ``@pytest.mark.vcr``, ``vcr_config``, ``vcr_cassette_dir``, ``--record-mode``,
  ``--block-network`` / ``--allowed-hosts`` and their markers (``_pytest_network.py``), the
  ``pytest_recording_configure`` hook, and the fixtures ``vcr`` / ``vcr_cassette``: the test's
  cassette with vcrpy's ``Cassette`` names (``cassettes/vcr_view.py``), so a suite moved with
  ``dejacache migrate`` runs without marker edits. pytest-recording and pytest-vcr, when
  installed, keep theirs (the report header says so).
* options (namespaced, so the plugin sits beside pytest-recording and others):
  ``--dejacache-mode`` (ini ``dejacache_mode``; ``dejacache_cassette_dir`` moves the
  cassettes), ``--dejacache-prune``, ``--dejacache-block-network``,
  ``--dejacache-strict`` (every cassette strict: calls must follow the recorded order;
  the marker's ``strict=True`` does it for one test), ``--dejacache-verify`` (``dejacache
  verify`` on the run's cassettes after it; every run records which cassettes and entries
  it used in ``.dejacache/usage.json``, which is what tells orphans; a directory that cannot
  be written costs a line in the summary, never the run), ``--dejacache-live`` (a pattern no
  call matched is named at the end of the session), ``--dejacache-min-hit-rate`` (the
  prompt-cache gate on the run's cassettes: ``planner/pytest_gate.py``).
* under ``CI`` the default mode is ``replay`` and cassette tests may reach loopback only.
* a test failing on a replay miss shows the miss first, without dejacache's frames
  (``_pytest_failure.py``).
* a terminal summary of replayed/recorded/missed calls, unused entries and what replay saved.

This module is imported by every pytest run wherever dejacache is installed, so it imports
nothing of dejacache's machinery itself: the cassette fixture's (``_pytest_cassette.py``),
the usage record's and the failure report's modules load when a test first needs them, and
a suite that uses no cassette pays for none of it (``benchmarks/bench_plugin.py``).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import pytest

# _pytest_imports first of dejacache's: it keeps pytest's assertion rewriting off the rest
# (sorted in among them, it came after _project, and five modules were rewritten). The
# package installs it already when imported under pytest; this covers a package imported
# before pytest was.
from . import _pytest_imports  # noqa: F401

# isort: split
from . import _project, _pytest_state, _pytest_usage, _pytest_vcr
from ._core.modes import MODES, option_mode
from ._pytest_state import cassette_path
from .cassettes import _events
from .errors import CassetteError, ConfigurationError, ReplayMiss

# Names used only in annotations stay out of the module: pytest looks every name of a
# plugin module over for fixtures and hooks, and a typing object costs it most to look at.
if TYPE_CHECKING:
    import pathlib
    from collections.abc import Callable, Generator, Iterator
    from typing import Any

    from .cassettes.store import Cassette

__all__ = ["cassette_path"]

_REMOTE: pytest.StashKey[list[dict[str, Any]]] = pytest.StashKey()
_SCENARIO: pytest.StashKey[bool] = pytest.StashKey()
_ADOPTED: pytest.StashKey[list[tuple[Cassette, Callable[[bool], None]]]] = pytest.StashKey()
# the test running when this one started
_OUTER: pytest.StashKey[pytest.Item | None] = pytest.StashKey()
_SAVED: pytest.StashKey[tuple[_project.Project | None,
                              dict[str, tuple[float, float]] | None]] = pytest.StashKey()
# recordings an interrupt cost
_DISCARDED: pytest.StashKey[list[tuple[pytest.Item, str]]] = pytest.StashKey()
_TOLD: pytest.StashKey[Callable[[Cassette, str], None]] = pytest.StashKey()

# The ini keys that are the plugin's own, not project settings (those come from
# _project.KEYS): name -> (type, default, help). One table, so the check that refuses a
# misspelt dejacache_* key knows them too and never suggests a setting in their place.
_PLUGIN_INI: dict[str, tuple[str, Any, str]] = {
    "dejacache_proxy_upstreams": (
        "linelist", [], "upstreams of the dejacache_proxy fixture's proxy: NAME=URL lines"),
    "dejacache_scenario": ("bool", False, "same as --dejacache-scenario"),
    "dejacache_min_hit_rate": ("string", "", "same as --dejacache-min-hit-rate"),
}


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    _pytest_vcr.addhooks(pluginmanager)  # pytest_recording_configure, when no one declares it


def pytest_report_header(config: pytest.Config) -> str | None:
    return _pytest_vcr.report_header(config)  # whose vcr fixture is in force, when not ours


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup("dejacache", "dejacache record/replay")

    def addoption(name: str, **attrs: Any) -> None:
        # dest given, as pytest derives it: without one, pytest checks it against every option
        # of every plugin (~300), which cost a run ~0.8M instructions for these 11.
        group.addoption(name, dest=name.removeprefix("--").replace("-", "_"), **attrs)

    addoption("--dejacache-mode", type=option_mode, choices=MODES, default=None,
              help="cassette mode for this run: auto, replay (vcrpy's none), record or off "
                   "(default: DEJACACHE_MODE, replay under CI, else auto)")
    addoption("--dejacache-prune", action="store_true", default=False,
              help="remove cassette entries that passing tests did not use")
    addoption("--dejacache-block-network", action="store_true", default=False,
              help="allow only loopback connections in cassette tests (on under CI)")
    addoption("--dejacache-live", metavar="KINDS", default=None,
              help="comma-separated kinds or names of calls that go live while every "
                   "other call replays, e.g. 'model' or 'tool:search_web'; recorded "
                   "into <cassette>.live.json, never the cassette (partial replay)")
    addoption("--dejacache-strict", action="store_true", default=False,
              help="strict replay for every cassette: calls must follow the recorded "
                   "order (per asyncio task / thread); a divergence fails the test")
    # The project settings' pytest spellings, one ini key per row of the table (_project):
    # each also read from [tool.dejacache] in pyproject.toml, below the ini key.
    for key in _project.KEYS.values():
        if key.ini is not None:
            parser.addini(key.ini, type=key.ini_type,  # type: ignore[arg-type]
                          default=[] if key.ini_type == "linelist" else "",
                          help=f"{key.help} (also [tool.dejacache] {key.name})")
    for name, (kind, default, text) in _PLUGIN_INI.items():
        parser.addini(name, type=kind, default=default, help=text)  # type: ignore[arg-type]
    _pytest_vcr.addoption(parser, pluginmanager)  # --record-mode, unless pytest-recording's
    addoption("--dejacache-scenario", action="store_true", default=False,
              help="record and replay every langwatch-scenario run through a cassette "
                   "named after the scenario (dejacache.integrations.scenario)")
    addoption("--dejacache-verify", action="store_true", default=False,
              help="after the run, verify the cassettes of the modules collected "
                   "(damage, secrets, entries no test used, expiry, format: "
                   "dejacache verify) and fail the session when one fails")
    addoption("--dejacache-report", metavar="DIR", default=None,
              help="write an HTML report of each cassette test's run into DIR: every "
                   "call replayed, recorded or unused (dejacache.report)")
    # The prompt-cache gate's (planner/pytest_gate.py, loaded only when a bar is set).
    addoption("--dejacache-min-hit-rate", type=float, default=None, metavar="RATE",
              help="fail the run when a recorded conversation's predicted prompt-cache "
                   "hit rate is below RATE (e.g. 0.7; dejacache prompt-cache check)")
    addoption("--dejacache-hit-rate-baseline", default=None, metavar="PATH",
              help="recordings to compare the predicted hit rates with (conversations "
                   "matched by name)")
    addoption("--dejacache-hit-rate-drop", type=float, default=0.05, metavar="RATE",
              help="how far below the baseline's a conversation may fall (0.05)")


def pytest_configure(config: pytest.Config) -> None:
    args = ", ".join(f"{k}={v}" for k, v in _pytest_state.MARKER_ARGS.items())
    config.addinivalue_line(
        "markers", f"dejacache({args}): record and replay this test's calls from a cassette")
    _check_environment()
    # pytest-recording's names, unless another plugin (pytest-recording, pytest-vcr) has
    # them: registered later, ours would replace its fixtures.
    _pytest_vcr.configure(config, open_cassette, _pytest_state.cassette_dir)
    config.stash[_pytest_state.TAPES] = []
    config.stash[_REMOTE] = []
    _configure_settings(config)
    if config.getoption("dejacache_scenario") or config.getini("dejacache_scenario"):
        try:
            from .integrations import scenario as scenario_integration

            scenario_integration.install()
        except ConfigurationError as exc:
            raise pytest.UsageError(f"--dejacache-scenario / dejacache_scenario: {exc}") from exc
        config.stash[_SCENARIO] = True
    # Replay needs no API key: SDK clients built at import time construct with a
    # placeholder, which the guard in placeholder_keys keeps off the wire.
    if (config.getoption("dejacache_mode") or _pytest_vcr.fallback_mode(config, True)
            ) == "replay":
        from .cassettes import placeholder_keys

        config.stash[_pytest_state.PLACEHOLDERS] = placeholder_keys.supply()
        placeholder_keys.EXPLAIN.append(_explain_refusal)
    _pytest_usage.configure(config, current_test)  # the record of which cassettes it used
    config.stash[_DISCARDED] = []

    def discarded(tape: Cassette, note: str) -> None:
        item = current_test()
        if item is not None and item.config is config:  # not an inner session's test
            config.stash[_DISCARDED].append((item, note))

    config.stash[_TOLD] = discarded
    _events.DISCARDED.append(discarded)
    if (config.getoption("dejacache_min_hit_rate") is not None
            or config.getini("dejacache_min_hit_rate")):  # the prompt-cache gate: a bar is set
        from .planner import pytest_gate

        pytest_gate.configure(config)


def _configure_settings(config: pytest.Config) -> None:
    """The project settings of the session (``[tool.dejacache]`` under the ini keys) and its
    prices. The process's settings this session changes are put back at unconfigure: a
    session run in-process (pytester, pytest.main() again) must neither inherit nor take
    them away."""
    project = _session_project(config)
    table: dict[str, tuple[float, float]] = project.get("prices") or {}
    saved_prices = None
    if table:
        from .cassettes.prices import PRICES, set_prices

        saved_prices = dict(PRICES)
        set_prices(table)
    config.stash[_SAVED] = (_project.use(project), saved_prices)
    _invalidate_settings()
    if not hasattr(config, "workerinput"):  # the controller: the last run's notes go
        from ._paths import default_cache_dir, note_files

        directory = default_cache_dir()
        # No notes, no module: _learn stays unloaded (~1.1M instructions a run).
        if directory is not None and note_files(directory):
            from ._learn import notes

            notes.clear(directory)


def _invalidate_settings() -> None:
    # Settings built before the project changed read it again (none exist before
    # dejacache.config is loaded: nothing to do, and nothing loaded for it).
    config = sys.modules.get("dejacache.config")
    if config is not None:
        config.settings_object().invalidate()


def _session_project(config: pytest.Config) -> _project.Project:
    """The project settings of this session: ``[tool.dejacache]`` of the pyproject.toml
    pytest reads (``DEJACACHE_PROJECT`` names another), under the ini keys; a misspelt or
    malformed key is a usage error (exit status 4) naming the closest known one."""
    import os

    inipath = config.inipath
    path: str | os.PathLike[str] | None
    if os.environ.get("DEJACACHE_PROJECT") is not None:
        path = _project.find()
    elif inipath is not None and inipath.name == "pyproject.toml":
        path = inipath
    else:
        candidate = config.rootpath / "pyproject.toml"
        path = candidate if candidate.is_file() else None
    try:
        _unknown_ini_keys(config)
        project = _project.load(path)
        where = f"ini {inipath.name}" if inipath is not None else "ini"
        return project.overlaid(_project.ini_values(config.getini, where), where)
    except ConfigurationError as exc:
        raise pytest.UsageError(str(exc)) from None


def _unknown_ini_keys(config: pytest.Config) -> None:
    """A ``dejacache_*`` ini key no plugin registered is a typo, not a setting to skip."""
    known = [*(k.ini for k in _project.KEYS.values() if k.ini), *_PLUGIN_INI]
    for name in _ini_names(config.inipath):
        if not name.startswith("dejacache_"):
            continue
        try:
            config.getini(name)
        except ValueError:
            from ._suggest import did_you_mean

            raise ConfigurationError(
                f"{config.inipath}: unknown ini key {name!r}{did_you_mean(name, known)} (the "
                f"dejacache keys: {', '.join(sorted(known))})") from None


def _ini_names(path: pathlib.Path | None) -> list[str]:
    """The keys of pytest's section of its ini file (pytest's own list of them is private;
    ``config.inicfg`` is deprecated)."""
    if path is None or not _may_name_ours(path):
        return []
    if path.name == "pyproject.toml":
        import tomllib

        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # pytest read it: nothing to add to what it says
            return []
        table = doc.get("tool", {}).get("pytest", {})
        return [*table.get("ini_options", {}), *(k for k in table if k != "ini_options")]
    import configparser

    cp = configparser.ConfigParser(interpolation=None)
    try:
        cp.read(path, encoding="utf-8")
    except (OSError, ValueError, configparser.Error):
        return []
    return [k for sec in ("pytest", "tool:pytest") if cp.has_section(sec)
            for k in cp.options(sec)]


def _may_name_ours(path: pathlib.Path) -> bool:
    """Whether the ini file may spell a ``dejacache_`` key: most name none, and are then
    neither parsed again nor is configparser loaded (a one-test run: ~8.8M instructions
    for a pytest.ini, ~8M for an 8 KB pyproject.toml). Case folded (configparser lowers
    its keys); a ``\\u`` escape in a TOML key could spell one too, so such a file is read."""
    try:
        data = path.read_bytes().lower()
    except OSError:
        return False  # (as an unreadable file names no key below)
    return b"dejacache_" in data or b"\\u" in data


def _check_environment() -> None:
    """Settings read from the environment, checked once at start-up: a bad value is a usage
    error (exit status 4), as a bad ``--dejacache-mode`` is, instead of an INTERNALERROR
    traceback (``DEJACACHE_MODE``) or the same error in every test (``DEJACACHE_VOLATILE``)."""
    checks: list[tuple[str, Callable[[], Any]]] = []
    if os.environ.get("DEJACACHE_MODE"):
        from .cassettes.block import default_mode

        checks.append(("DEJACACHE_MODE", default_mode))
    if os.environ.get("DEJACACHE_VOLATILE"):
        from .keys import env_volatile

        checks.append(("DEJACACHE_VOLATILE", env_volatile))
    for var, check in checks:
        try:
            check()
        except ConfigurationError as exc:
            why = str(exc)
            raise pytest.UsageError(why if var in why else f"{var}: {why}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    placeholders = config.stash.get(_pytest_state.PLACEHOLDERS, None)
    if _pytest_state.PLACEHOLDERS in config.stash:
        from .cassettes import placeholder_keys

        placeholder_keys.withdraw(placeholders)
        if _explain_refusal in placeholder_keys.EXPLAIN:
            placeholder_keys.EXPLAIN.remove(_explain_refusal)
    told = config.stash.get(_TOLD, None)
    if told is not None and told in _events.DISCARDED:
        _events.DISCARDED.remove(told)
    if _SAVED in config.stash:
        saved_project, saved_prices = config.stash[_SAVED]
        _project.use(saved_project)
        _invalidate_settings()
        if saved_prices is not None:
            from .cassettes.prices import set_prices

            set_prices(saved_prices, replace=True)
    _pytest_usage.unconfigure(config)
    if config.stash.get(_SCENARIO, False):
        from .integrations import scenario as scenario_integration

        scenario_integration.uninstall()


# ---------------------------------------------------------------- integrations
# Integrations (dejacache.integrations.scenario) open cassettes of their own inside a test:
# they ask which test is running, take its settings, and hand their tapes over so the
# summary counts them, a failure shows their misses, and the file is written only when the
# test passes.

_CURRENT_ITEM: pytest.Item | None = None


def current_test() -> pytest.Item | None:
    """The test being run in this process (None between tests)."""
    return _CURRENT_ITEM


def integration_settings(item: pytest.Item) -> dict[str, Any]:
    """Directory, mode, prune flag and re-record command for an integration's cassettes."""
    marker = item.get_closest_marker("dejacache")
    config = item.config
    return {
        "cassette_dir": cassette_path(item).with_suffix(""),
        "mode": (marker.kwargs.get("mode") if marker is not None else None)
        or config.getoption("dejacache_mode"),
        "prune": bool(config.getoption("dejacache_prune")),
        "rerecord_hint": _pytest_state.rerecord_command(item),
    }


def adopt_tape(item: pytest.Item, tape: Cassette, finish: Callable[[bool], None]) -> None:
    """Count ``tape`` with the test's; ``finish(test_passed)`` runs at the test's teardown."""
    item.config.stash[_pytest_state.TAPES].append((item.nodeid, tape))
    item.stash.setdefault(_ADOPTED, []).append((tape, finish))


def _explain_refusal(host: str, keys: str) -> str | None:
    item = current_test()
    if item is None:
        return None
    from ._pytest_cassette import placeholder_advice

    return placeholder_advice(item, host, keys)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    for item in items:  # a typo fails the run before any test records to the wrong place
        for marker in item.iter_markers("dejacache"):
            _pytest_state.check_marker(item, marker)


# ---------------------------------------------------------------- test lifecycle


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    global _CURRENT_ITEM
    # Not None between them: a session run in-process from inside a test (pytester) sets
    # its own, and the outer test is the one running again when it ends.
    item.stash[_OUTER] = _CURRENT_ITEM
    _CURRENT_ITEM = item
    done = yield
    # The working directory and project root as the fixtures left them (monkeypatch.chdir),
    # found here, off any event loop: a block the test opens on a loop (a relative path,
    # the default store's directory) then asks nothing there, where a loop checker fails
    # the call (_paths.cwd).
    from ._paths import asked_here

    asked_here()
    return done


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Generator[None, None, None]:
    global _CURRENT_ITEM
    try:
        return (yield)
    finally:
        _CURRENT_ITEM = item.stash.get(_OUTER, None)
        adopted = item.stash.get(_ADOPTED, [])
        if adopted:
            passed = _pytest_state.ending(item) is None
            errors: list[BaseException] = []
            for _, finish in adopted:
                try:
                    finish(passed)
                except Exception as exc:  # every tape gets closed; the first error is raised
                    errors.append(exc)
            adopted.clear()
            if errors:
                raise errors[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    item.stash.setdefault(_pytest_state.REPORTS, {})[rep.when] = rep
    if call.excinfo is not None and rep.when == "call":
        item.stash[_pytest_state.RAISED] = call.excinfo.type
    if not rep.failed or call.excinfo is None:
        return rep
    if isinstance(call.excinfo.value, ReplayMiss):
        option = item.config.option
        if not getattr(option, "fulltrace", False) and getattr(option, "tbstyle", "") != "native":
            from ._pytest_failure import failure_repr

            rep.longrepr = failure_repr(item, call.excinfo)  # type: ignore[assignment]
        return rep
    tapes = [t for t in (item.stash.get(_pytest_state.TAPE, None),
                         *(a for a, _ in item.stash.get(_ADOPTED, []))) if t is not None]
    for tape in tapes:  # an SDK or a framework wrapped the miss: put it first
        if tape.misses:
            from ._pytest_cassette import show_misses

            show_misses(rep, tape)
    return rep


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    # Ctrl-C or pytest.exit(): called before the session's fixtures are torn down (at
    # session finish), where the test whose call was cut short has no call report at all.
    item = current_test()
    if item is not None:
        stopped = excinfo.type  # (pytest's Exit is an Exception: stand for it as the exit)
        item.config.stash[_pytest_state.STOPPED] = stopped \
            if issubclass(stopped, _events.INTERRUPTIONS) else SystemExit


@pytest.fixture
def dejacache_cassette(request: pytest.FixtureRequest) -> Iterator[Cassette]:
    """The test's cassette, active for the whole test (see the module docstring)."""
    item = request.node
    opts = _pytest_state.marker_options(item)
    explicit = opts.get("cassette")
    yield from open_cassette(request, cassette_path(item, explicit), opts,
                             shared=explicit is not None)


def open_cassette(request: pytest.FixtureRequest, path: pathlib.Path, opts: dict[str, Any],
                  *, shared: bool) -> Iterator[Cassette]:
    """The cassette block at ``path`` for the test, open while it runs (a fixture's body:
    ``dejacache_cassette``'s, and the ``vcr`` fixture's for ``@pytest.mark.vcr``); ``opts``
    are the marker's options. The machinery loads with the first test that opens one."""
    from . import _pytest_cassette

    yield from _pytest_cassette.open_cassette(request, path, opts, shared=shared)


@pytest.fixture(autouse=True)
def _dejacache_marker(request: pytest.FixtureRequest) -> None:
    # The plugin's only autouse fixture, cheap for unmarked tests (two marker lookups): pytest
    # spends ~0.28 ms of each test on each autouse fixture, whatever it does (2,000 trivial
    # tests: 3.71 s, 4.83 s with two that do nothing), so the vcr tests' fixture is set up
    # from here too. A test whose agent goes through the proxy has its cassette open there
    # (two writers of one file would race).
    if request.node.get_closest_marker("dejacache") is not None:
        if "dejacache_proxy" not in request.fixturenames:
            request.getfixturevalue("dejacache_cassette")
    elif _pytest_vcr.wanted(request):
        request.getfixturevalue("vcr")
    _pytest_vcr.block_network(request)  # --block-network, @pytest.mark.block_network


@pytest.fixture(scope="session")
def dejacache_proxy_server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """One ``dejacache proxy`` for the session (``dejacache.proxy()``), whose sessions the
    ``dejacache_proxy`` fixture opens per test."""
    from .proxying.handle import proxy

    upstreams = {}
    for line in request.config.getini("dejacache_proxy_upstreams"):
        name, sep, url = line.partition("=")
        if not sep:
            raise pytest.UsageError(f"dejacache_proxy_upstreams: {line!r} is not NAME=URL")
        upstreams[name.strip()] = url.strip()
    with proxy(upstreams=upstreams, cassette_dir=request.config.rootpath) as p:
        yield p


@pytest.fixture
def dejacache_proxy(request: pytest.FixtureRequest, dejacache_proxy_server: Any) -> Iterator[Any]:
    """The test's cassette (as ``dejacache_cassette`` names it, with the marker's ``mode``,
    ``strict``, ``live``, ``replay_until``, ``expect_misses``) open on the session's proxy;
    written when the test passes. A passing test whose agent met a miss fails, as with
    ``dejacache_cassette``."""
    item = request.node
    marker = item.get_closest_marker("dejacache")
    opts: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    path = cassette_path(item, opts.get("cassette") or (marker.args[0] if marker is not None
                                                        and marker.args else None))
    config = request.config
    live = opts.get("live", config.getoption("dejacache_live") or _project.current().get(
        "live"))
    session = dejacache_proxy_server.session(
        path, mode=opts.get("mode") or config.getoption("dejacache_mode")
        or _project.default_mode(path.exists()),
        strict=bool(opts.get("strict", False) or config.getoption("dejacache_strict")),
        live=live.split(",") if isinstance(live, str) else live,
        replay_until=opts.get("replay_until"), rerecord=_pytest_state.rerecord_command(item))
    try:
        yield session
    finally:
        failed = any(r.failed for r in item.stash.get(_pytest_state.REPORTS, {}).values())
        try:
            session.close(ok=not failed, expect_misses=opts.get("expect_misses", False))
        except CassetteError as exc:  # a miss met, a save failed, a strict contract broken
            pytest.fail(str(exc), pytrace=False)



# ---------------------------------------------------------------- summary


def _claimed(item: pytest.Item) -> list[pathlib.Path]:
    """The cassettes a test may use: its own, and the one its marker names."""
    marker = item.get_closest_marker("dejacache")
    named = marker and (marker.kwargs.get("cassette") or (marker.args or [None])[0])
    return [cassette_path(item), *([cassette_path(item, named)] if named else []),
            *_pytest_vcr.claimed(item)]


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _pytest_usage.collected(report)  # a collector that failed or was skipped: doubts orphans


def pytest_deselected(items: list[pytest.Item]) -> None:
    _pytest_usage.deselected(items)  # deselected tests still claim their cassettes


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    workeroutput = getattr(config, "workeroutput", None)
    # writes the usage record (and carries out --dejacache-verify)
    usage = _pytest_usage.finish(session, _claimed, lambda item: _pytest_usage.outcome(
        item.stash.get(_pytest_state.REPORTS, {})))
    if workeroutput is not None and usage is not None:
        workeroutput["dejacache_usage"] = usage
    tapes = config.stash.get(_pytest_state.TAPES, [])
    _note_suggestions(config, tapes)
    if workeroutput is not None and tapes:  # an xdist worker: hand the numbers over
        from ._pytest_cassette import worker_numbers

        workeroutput["dejacache"] = worker_numbers(tapes)


def _suggested(tapes: list[tuple[str, Cassette]]) -> list[dict[str, Any]]:
    return [{"rules": list(m.suggestion), "cassette": str(t.path), "name": m.name,
             "key": m.key} for _, t in tapes for m in t.misses if m.suggestion]


def _note_suggestions(config: pytest.Config, tapes: list[tuple[str, Cassette]]) -> None:
    """The rules this run's misses suggested, for ``dejacache learn --from-miss``."""
    found = _suggested(tapes)
    if found:
        from ._learn import notes
        from ._paths import default_cache_dir

        worker = getattr(config, "workerinput", {}).get("workerid")
        notes.write(default_cache_dir(), found, worker)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    usage = getattr(node, "workeroutput", {}).get("dejacache_usage")
    if usage is not None:
        _pytest_usage.worker_part(node.config, usage)
    data = getattr(node, "workeroutput", {}).get("dejacache")
    if data:
        node.config.stash.setdefault(_REMOTE, []).append(data)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config
                            ) -> None:
    _pytest_usage.summary(terminalreporter, config)
    tapes = config.stash.get(_pytest_state.TAPES, [])
    remote = config.stash.get(_REMOTE, [])
    # (a test that caught the interruption itself and passed lost nothing it meant to keep)
    discarded = [f"{note} ({item.nodeid})" for item, note in config.stash.get(_DISCARDED, [])
                 if _pytest_state.ending(item) is not None]
    notes = [n for n in (_pytest_usage.unwritten(config), _live_note(config),
                         _invalidation_note()) if n]
    if not tapes and not remote and not discarded and not notes:
        return
    terminalreporter.section("dejacache")
    if tapes or remote:
        from ._pytest_cassette import summary_counts

        summary_counts(terminalreporter, tapes, remote, bool(config.getoption("dejacache_prune")))
    for note in discarded:  # (a test cut short writes nothing: say what it recorded)
        terminalreporter.write_line(note)
    for note in notes:
        terminalreporter.write_line(note, yellow=True)
    suggested = _suggested(tapes)
    if suggested:
        terminalreporter.write_line(
            f"{len(suggested)} replay miss{'es' * (len(suggested) != 1)} differed from "
            "the nearest recording only in volatile text (timestamps, ids, nonces...): "
            "`dejacache learn --from-miss` adds the rules they print to pyproject.toml and "
            "re-keys the cassettes")


def _live_note(config: pytest.Config) -> str | None:
    seen = config.stash.get(_pytest_state.LIVE_SEEN, [])
    if not seen:
        return None
    from ._pytest_cassette import live_summary

    return live_summary(seen)


def _invalidation_note() -> str | None:
    """``@invalidates`` resources that no ``@tool_cache`` of this process reads (only when
    the runtime face was used at all)."""
    layout = sys.modules.get("dejacache.runtime._layout")
    if layout is None:
        return None
    note: str | None = layout.unmatched_invalidations()
    return note


# What pytest and pluggy look over for hooks and fixtures (19 of the module's 69 names).
__dir__ = _pytest_state.plugin_dir(globals(), type(dejacache_cassette))
