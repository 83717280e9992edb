"""pytest-recording's surface, served by dejacache cassettes: a vcrpy suite runs unchanged.

When neither pytest-recording nor pytest-vcr is installed (no other plugin has a ``vcr``
fixture), the plugin takes their names:

* ``@pytest.mark.vcr`` opens a dejacache cassette for the test at the path pytest-recording
  reads its cassette from, with ``.json`` for its suffix: ``<vcr_cassette_dir>/<default
  cassette name>.json`` (``cassette_library_dir`` in ``vcr_config`` wins, as in vcrpy), the
  name pytest-recording gives (``TestClass.test_name[param-id]``), so ``dejacache migrate``
  writes each imported cassette beside its source under the same name.
* the fixtures ``vcr`` (set up for every ``vcr`` test, as pytest-recording's autouse one is:
  the test's :class:`~.cassettes.vcr_view.VcrView`, None for a test without the marker that
  names it), ``vcr_cassette`` (pytest-vcr's name),
  ``vcr_config``, ``vcr_cassette_dir``, ``default_cassette_name`` and ``record_mode``, which a
  conftest overrides as before;
* the markers ``vcr`` and ``default_cassette`` (registered, so ``--strict-markers`` suites
  collect); ``block_network`` and ``allowed_hosts`` with the options ``--block-network`` and
  ``--allowed-hosts``, enforced as pytest-recording does (``_pytest_network.py``, loaded by
  the first test they seal); the option ``--record-mode`` and the
  hook ``pytest_recording_configure(config, vcr)`` (declared, so a conftest that implements it
  loads). The hook is called only when a test reads ``vcr._path``: the serializer and
  persister it registers write that file in the suite's own layout.

vcrpy's record modes map onto dejacache's (:func:`vcr_mode`); a mode set on the command line
(``--dejacache-mode``, ``--record-mode``) or in ``DEJACACHE_MODE`` wins over the one in
``vcr_config`` or the marker, which wins over the project file's (the ``dejacache_mode`` ini
key, then ``[tool.dejacache] mode``). When
pytest-recording is installed its fixture stays its own, and the report header says so once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import pathlib
import sys
import types
from typing import TYPE_CHECKING

import pytest

from . import _pytest_state
from ._core.modes import MODES, VCR_MODES, vcr_mode
from .errors import ConfigurationError

# Annotation-only names out of the module (as in pytest_plugin: pytest looks every name of a
# plugin module over, and typing objects cost it most).
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any, Final

    from .cassettes.vcr_view import VcrView

    Opener = Callable[..., Iterator[Any]]
    CassetteDir = Callable[[pytest.Item, pathlib.Path], pathlib.Path]

__all__ = [
    "addhooks",
    "addoption",
    "block_network",
    "claimed",
    "configure",
    "fallback_mode",
    "report_header",
    "vcr_mode",
]

_RECORDING: Final = "recording"  # pytest-recording's plugin name (its pytest11 entry point)
_FIXTURES: Final = "dejacache-vcr"  # this module's plugin name
# the plugin whose ``vcr`` fixture is in force
_FOREIGN: pytest.StashKey[str | None] = pytest.StashKey()
# the cassette a @pytest.mark.vcr test opened
_PATH: pytest.StashKey[pathlib.Path] = pytest.StashKey()
_PLUGIN: pytest.StashKey[tuple[Opener, CassetteDir]] = pytest.StashKey()
# None: another plugin's markers and options; else whether --block-network seals every test
_SEAL_ALL: pytest.StashKey[bool | None] = pytest.StashKey()
# pytest-recording replaces these in a cassette name (they are not allowed in file names).
_FORBIDDEN: Final = "<>?%*:|\"'/\\"
_MAX_NAME: Final = 255


def _default_mode(exists: bool = True, otherwise: str = "auto") -> str:
    """``configure()``, ``DEJACACHE_MODE``, ``CI``, the project file (``_project``): read in
    every run, so not through the cassette machinery (test_pytest_plugin_cost.py)."""
    from ._project import default_mode

    return default_mode(exists, otherwise)


def _mode_given() -> bool:
    """Whether ``configure(mode=...)`` or ``DEJACACHE_MODE`` names the mode (``configure()``
    only once ``dejacache.config`` is loaded: it cannot have been called before)."""
    if os.environ.get("DEJACACHE_MODE"):
        return True
    config = sys.modules.get("dejacache.config")
    return config is not None and bool(config.settings_object().mode)


def _mode_named(name: str, exists: bool, where: str) -> str:
    """A mode given in either vocabulary."""
    if name in MODES:
        return name
    try:
        return vcr_mode(name, exists)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc}") from None


@functools.cache
def _installed(module: str) -> bool:
    """Whether ``module`` can be imported. Once per process: the answer for a module that is
    not there is a search of every ``sys.path`` entry (~0.7M instructions), and a run asks
    for pytest-recording twice (its hook, its option)."""
    return importlib.util.find_spec(module) is not None


def _pytest_recording_active(pluginmanager: pytest.PytestPluginManager) -> bool:
    return _installed("pytest_recording") \
        and not pluginmanager.is_blocked(_RECORDING)


# Plugins that add ``--record-mode`` themselves: with one of them loaded, the option is
# theirs (two plugins adding one option name stop pytest before it collects anything).
_ALSO_RECORD_MODE: Final = (("pytest_recording", _RECORDING), ("agentcassette", "agentcassette"))


def addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """``--record-mode``, unless a plugin that has it (pytest-recording) will be loaded;
    ``--block-network`` and ``--allowed-hosts`` unless pytest-recording will be."""
    if not _pytest_recording_active(pluginmanager):
        # In pytest-recording's group: a plugin loaded before that adds them there too makes
        # ours a ValueError (skipped), not the clash of two groups that stops pytest.
        group = parser.getgroup("recording", "pytest-recording's options (served by dejacache)")
        with contextlib.suppress(ValueError):
            group.addoption(
                "--block-network", action="store_true", default=False, dest="block_network",
                help="pytest-recording's option: refuse every socket connection (loopback "
                     "too) but to --allowed-hosts, in every test except one recording its "
                     "cassette")
        with contextlib.suppress(ValueError):
            group.addoption(
                "--allowed-hosts", default=None, dest="allowed_hosts", metavar="REGEXES",
                help="comma-separated regular expressions of the hosts (names or addresses) "
                     "a test sealed by --block-network or @pytest.mark.block_network may "
                     "reach")
        with contextlib.suppress(ValueError):
            group.addoption(
                "--disable-recording", action="store_true", default=False,
                dest="disable_recording",
                help="pytest-recording's option: @pytest.mark.vcr tests use no cassette "
                     "(their calls go live, as with mode off)")
    if any(_installed(module) and not pluginmanager.is_blocked(name)
           for module, name in _ALSO_RECORD_MODE):
        return
    with contextlib.suppress(ValueError):  # another plugin has it: tests read it all the same
        parser.getgroup("dejacache").addoption(
            "--record-mode", choices=VCR_MODES, default=None, dest="record_mode",
            help="vcrpy's record mode for @pytest.mark.vcr tests (pytest-recording's "
                 "option: none = replay, once, new_episodes = auto, all / rewrite = record)")


def _recording_configure(config: pytest.Config, vcr: Any) -> None:
    """A conftest's chance to register serializers, matchers and persisters."""


def addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Declares the hook pytest-recording declares, when it is not installed."""
    if not _pytest_recording_active(pluginmanager) \
            and not hasattr(pluginmanager.hook, "pytest_recording_configure"):
        # On a module object of its own: pluggy looks over every name of what it is given,
        # and the 28 of a class (object's among them) cost a run ~1M instructions.
        specs = types.ModuleType(f"{__name__}.hookspecs")
        specs.pytest_recording_configure = pytest.hookspec(  # type: ignore[attr-defined]
            _recording_configure)
        pluginmanager.add_hookspecs(specs)


def configure(config: pytest.Config, opener: Opener, cassette_dir: CassetteDir) -> None:
    """Take pytest-recording's names, or note whose they are. ``opener`` opens a test's
    cassette block (the plugin's ``open_cassette``), ``cassette_dir`` says where a test
    file's cassettes are: handed over, so this module does not import the plugin's."""
    config.stash[_PLUGIN] = (opener, cassette_dir)
    pm = config.pluginmanager
    owner = next((pm.get_name(p) or type(p).__name__ for p in pm.get_plugins()
                  if hasattr(p, "vcr") and p is not sys.modules[__name__]), None)
    config.stash[_FOREIGN] = owner
    if owner is not None:
        config.stash[_SEAL_ALL] = None  # the markers and options are the other plugin's
        return
    config.stash[_SEAL_ALL] = bool(config.getoption("block_network", False))
    for line in ("vcr: record and replay this test's HTTP calls from a cassette (dejacache)",
                 "default_cassette(name): the cassette name for a vcr test",
                 "block_network(allowed_hosts=[...]): refuse this test's socket "
                 "connections (loopback too; NetworkDisabled, a RuntimeError) but to the "
                 "hosts matching allowed_hosts' regexes, unless it records its cassette "
                 "(pytest-recording's marker; --block-network does it for every test)",
                 "allowed_hosts(hosts): regexes of the hosts a test sealed by "
                 "block_network may reach, when its marker names none (before "
                 "--allowed-hosts and vcr_config's allowed_hosts)"):
        config.addinivalue_line("markers", line)
    if not pm.has_plugin(_FIXTURES):
        pm.register(sys.modules[__name__], _FIXTURES)


def report_header(config: pytest.Config) -> str | None:
    owner = config.stash.get(_FOREIGN, None)
    if owner is None:
        return None
    return (f"dejacache: the vcr fixture and @pytest.mark.vcr are {owner}'s here (vcrpy "
            "replays them, not dejacache); uninstall it, or run with -p no:recording, to "
            "replay the cassettes `dejacache migrate` wrote")


def claimed(item: pytest.Item) -> list[pathlib.Path]:
    """The cassette a ``@pytest.mark.vcr`` test opened (for the usage record)."""
    path = item.stash.get(_PATH, None)
    return [] if path is None else [path]


def fallback_mode(config: pytest.Config, exists: bool) -> str:
    """The mode of a test that names none: ``--record-mode``, else ``configure()`` /
    ``DEJACACHE_MODE``, else ``replay`` under ``CI``, else the project file's (the
    ``dejacache_mode`` ini key, then ``[tool.dejacache] mode``; either vocabulary), else
    ``auto``."""
    cli = _cli_record_mode(config, exists)
    return cli if cli is not None else _default_mode(exists)


def _cli_record_mode(config: pytest.Config, exists: bool) -> str | None:
    """``--record-mode``, when it is ours (another plugin's may mean something else)."""
    pm = config.pluginmanager
    if any(pm.has_plugin(name) for _, name in _ALSO_RECORD_MODE) \
            or config.stash.get(_FOREIGN, None):
        return None
    name = config.getoption("record_mode", None)
    return vcr_mode(name, exists) if isinstance(name, str) and name in VCR_MODES else None


def _test_mode(config: pytest.Config, asked: str | None, exists: bool) -> str:
    """A vcr test's mode: ``off`` under ``--disable-recording``, the command line, then
    ``DEJACACHE_MODE``, then ``asked`` (the
    marker's or ``vcr_config``'s ``record_mode``), then ``CI`` and the ini key, else
    ``replay``: pytest-recording's default ``--record-mode`` is ``none``, so a suite moved
    over must not start going live (with the developer's key) on every call it misses."""
    if config.getoption("disable_recording", False):
        return "off"  # pytest-recording's --disable-recording: no cassette at all
    cli = config.getoption("dejacache_mode") or _cli_record_mode(config, exists)
    if cli:
        return str(cli)
    if _mode_given():
        return _default_mode()
    if asked is not None:
        return _mode_named(asked, exists, "vcr record_mode")
    return _default_mode(exists, otherwise="replay")


def _merged(request: pytest.FixtureRequest) -> tuple[dict[str, Any], list[pytest.Mark]]:
    """``vcr_config`` with the markers' arguments over it, the nearest marker last (as
    pytest-recording merges them)."""
    markers = list(request.node.iter_markers(name="vcr"))
    merged = dict(request.getfixturevalue("vcr_config") or {})
    for marker in reversed(markers):
        merged.update(marker.kwargs)
    return merged, markers


def _cassette_file(request: pytest.FixtureRequest, merged: dict[str, Any]) -> pathlib.Path:
    name = str(request.getfixturevalue("default_cassette_name"))
    if len(name) + len(".json") > _MAX_NAME:  # as pytest-recording shortens it
        digest = hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()
        name = f"{name[:_MAX_NAME - len('.json') - len(digest) - 3]}...{digest}"
    directory = merged.get("cassette_library_dir") or request.getfixturevalue(
        "vcr_cassette_dir")
    return pathlib.Path(directory) / f"{name}.json"


def _names(values: Any) -> list[str]:
    """``filter_*`` entries (names, or ``(name, replacement)`` pairs) as names."""
    out = []
    for v in values or ():
        name = v[0] if isinstance(v, (tuple, list)) and v else v
        if isinstance(name, str):
            out.append(name)
    return out


def _options(config: pytest.Config, merged: dict[str, Any], markers: list[pytest.Mark],
             path: pathlib.Path) -> dict[str, Any]:
    """The marker options of the dejacache cassette that stands for the test's vcrpy one."""
    extra = [a for m in markers for a in m.args]
    if extra:
        raise ConfigurationError(
            f"@pytest.mark.vcr{tuple(extra)!r}: extra cassettes are read by vcrpy only; "
            f"import them into {path} (dejacache import FILE -o {path.name}) and drop them "
            "from the marker")
    asked = merged.get("record_mode")
    mode = _test_mode(config, asked if isinstance(asked, str) else None, path.exists())
    opts: dict[str, Any] = {"mode": mode}
    redact = _names(merged.get("filter_query_parameters")) + _names(
        merged.get("filter_post_data_parameters"))
    if redact:
        opts["redact"] = redact
    allowed = merged.get("allowed_hosts")
    if isinstance(allowed, str):
        allowed = allowed.split(",")
    if allowed:
        opts["allow_hosts"] = list(allowed)
    return opts


class _HookVcr:
    """What a conftest's ``pytest_recording_configure`` is handed for ``vcr``: it keeps the
    serializers, persister and matchers registered (the first two write ``vcr._path``) and
    any setting assigned."""

    def __init__(self) -> None:
        self.serializers: dict[str, Any] = {}
        self.matchers: dict[str, Any] = {}
        self.persister: Any = None
        self.settings: dict[str, Any] = {}

    def register_serializer(self, name: str, serializer: Any) -> None:
        self.serializers[name] = serializer

    def register_matcher(self, name: str, matcher: Callable[..., Any]) -> None:
        self.matchers[name] = matcher

    def register_persister(self, persister: Any) -> None:
        self.persister = persister

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("serializers", "matchers", "persister", "settings"):
            object.__setattr__(self, name, value)
        else:
            self.settings[name] = value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"pytest_recording_configure: dejacache hands the hook a stand-in for vcrpy's VCR "
            f"that has no {name!r} (it keeps register_serializer, register_persister, "
            "register_matcher and assigned settings)")


def _exporter(request: pytest.FixtureRequest, merged: dict[str, Any], path: pathlib.Path
              ) -> Callable[[VcrView], pathlib.Path]:
    config = request.config
    serializer_name = str(merged.get("serializer", "yaml"))
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    base = factory.getbasetemp() / "dejacache-vcr"

    def export(view: VcrView) -> pathlib.Path:
        out = base / path.parent.name / f"{path.stem}.{serializer_name}"
        if not (view.tape.exists or view.dirty):
            return out  # no cassette: vcrpy's _path names a file that is not there either
        out.parent.mkdir(parents=True, exist_ok=True)
        hooked = _HookVcr()
        config.hook.pytest_recording_configure(config=config, vcr=hooked)
        _write(out, view, serializer_name, hooked)
        return out

    return export


def _write(out: pathlib.Path, view: VcrView, serializer_name: str, hooked: _HookVcr) -> None:
    """The cassette in vcrpy's layout: through the suite's persister and serializer when
    vcrpy is there to build its requests, else through its serializer (which vcrpy hands the
    same ``interactions`` document), else as JSON."""
    from .cassettes.vcr_view import vcr_document

    doc = vcr_document(view)
    try:  # (imported by name: vcrpy ships no type information)
        persisters: Any = importlib.import_module("vcr.persisters.filesystem")
        requests_mod: Any = importlib.import_module("vcr.request")
        serializers: Any = importlib.import_module("vcr.serializers")
    except ImportError:
        serializer = hooked.serializers.get(serializer_name)
        data: Any = serializer.serialize(doc) if serializer is not None else \
            json.dumps(doc, default=_text)
        out.write_bytes(data if isinstance(data, bytes) else str(data).encode())
        return
    builtin = {"yaml": serializers.yamlserializer, "json": serializers.jsonserializer}
    serializer = hooked.serializers.get(serializer_name) or builtin.get(serializer_name)
    if serializer is None:
        raise ConfigurationError(f"vcr_config serializer {serializer_name!r} is not "
                                 "registered (pytest_recording_configure registers none)")
    requests, responses = [], []
    for it, (_, resp) in zip(doc["interactions"], view.data, strict=True):
        q = it["request"]
        requests.append(requests_mod.Request(q["method"], q["uri"], q["body"],
                                {k: v[0] for k, v in q["headers"].items()}))
        responses.append({"status": resp["status"], "headers": resp["headers"],
                          "body": {"string": resp["body"]["string"]}})
    persister = hooked.persister or persisters.FilesystemPersister
    persister.save_cassette(out, {"requests": requests, "responses": responses},
                            serializer=serializer)


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(type(value).__name__)


def _names_vcr(request: pytest.FixtureRequest) -> bool:
    """Whether the test function itself asks for ``vcr`` (an unmarked test that does gets its
    dejacache cassette, as before the marker was honoured)."""
    fn = getattr(request, "function", None)
    try:
        return fn is not None and "vcr" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


# pytest-recording's fixtures: this module is registered as a plugin (only when no other
# plugin has a ``vcr`` fixture), so they are module functions, as a conftest's are, and
# pytest is shown them only (__dir__, at the end: 6 of the module's 67 names).


@pytest.fixture
def vcr_config() -> dict[str, Any]:
    """Options for every vcr test's cassette (overridden in a conftest)."""
    return {}


@pytest.fixture(scope="module")
def vcr_cassette_dir(request: pytest.FixtureRequest) -> str:
    """``<test dir>/cassettes/<module>``, or ``<dejacache_cassette_dir>/<module>``."""
    test_file = pathlib.Path(str(request.node.path))
    cassette_dir = request.config.stash[_PLUGIN][1]
    return str(cassette_dir(request.node, test_file) / test_file.stem)


@pytest.fixture
def default_cassette_name(request: pytest.FixtureRequest) -> str:
    marker = request.node.get_closest_marker("default_cassette")
    if marker is not None and marker.args:
        return str(marker.args[0])
    cls = request.cls
    name = f"{cls.__name__}.{request.node.name}" if cls else request.node.name
    for ch in _FORBIDDEN:
        name = name.replace(ch, "-")
    return name


@pytest.fixture(scope="session")
def record_mode(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("record_mode", None) or "none")


def wanted(request: pytest.FixtureRequest) -> bool:
    """Whether the test is marked ``vcr`` and the ``vcr`` fixture is this module's: the
    plugin's one autouse fixture then sets it up (pytest-recording's is autouse itself; ours
    is not, as each autouse fixture costs every test of a suite, marked or not)."""
    return request.node.get_closest_marker("vcr") is not None \
        and request.config.pluginmanager.has_plugin(_FIXTURES)


def block_network(request: pytest.FixtureRequest) -> None:
    """Seal the test when ``--block-network`` or its ``block_network`` marker asks (called
    by the plugin's autouse fixture after the test's cassette is open: one stash read and
    one marker lookup for a test that asks nothing; the guard loads with the first sealed
    test)."""
    every = request.config.stash.get(_SEAL_ALL, None)
    if every is None:
        return
    marker = request.node.get_closest_marker("block_network")
    if every or marker is not None:
        from ._pytest_network import seal

        seal(request, marker, "@pytest.mark.block_network" if marker is not None
             else "--block-network")


@pytest.fixture
def vcr(request: pytest.FixtureRequest) -> Iterator[VcrView | None]:
    """The test's cassette with vcrpy's ``Cassette`` names; None for a test with neither
    marker that does not name ``vcr`` itself. Set up for every ``vcr`` test, named or not
    (the plugin's ``_dejacache_marker`` asks for it)."""
    node = request.node
    if node.get_closest_marker("dejacache") is not None or (
            node.get_closest_marker("vcr") is None and _names_vcr(request)):
        from .cassettes.vcr_view import VcrView

        yield VcrView(request.getfixturevalue("dejacache_cassette"))
        return
    if node.get_closest_marker("vcr") is None:
        yield None
        return
    open_cassette = request.config.stash[_PLUGIN][0]
    merged, markers = _merged(request)
    path = _cassette_file(request, merged)
    try:
        opts = _options(request.config, merged, markers, path)
    except ConfigurationError as exc:
        pytest.fail(str(exc), pytrace=False)
    node.stash[_PATH] = path
    asked = merged.get("record_mode")
    named = request.config.getoption("record_mode", None) or (
        asked if isinstance(asked, str) and asked in VCR_MODES else None)
    from .cassettes.vcr_view import VcrView

    for tape in open_cassette(request, path, opts, shared=False):
        yield VcrView(tape, record_mode=None if request.config.getoption(
            "dejacache_mode") else named, export=_exporter(request, merged, path))


@pytest.fixture
def vcr_cassette(vcr: VcrView | None, request: pytest.FixtureRequest) -> VcrView:
    """pytest-vcr's name for the test's cassette."""
    if vcr is not None:
        return vcr
    from .cassettes.vcr_view import VcrView

    return VcrView(request.getfixturevalue("dejacache_cassette"))


__dir__ = _pytest_state.plugin_dir(globals(), type(vcr))
