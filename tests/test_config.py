"""configure(), environment variables, default store, and which setting wins."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

import dejacache
from dejacache import config
from dejacache._configure import configure
from dejacache.config import MODES, default_cache_dir, get_settings, resolve_mode
from dejacache.errors import ConfigurationError
from dejacache.scope import current


def _counter() -> tuple[Any, list[int]]:
    calls: list[int] = []

    @dejacache.cache(name="cfg.f")
    def f(x: int) -> int:
        calls.append(x)
        return x * 2

    return f, calls


def test_defaults(tmp_path: pathlib.Path) -> None:
    eff = get_settings()
    assert eff.mode == "auto"
    assert eff.namespace == "default"
    db = tmp_path / ".dejacache" / "cache.db"
    # The default store is opened on first use: settings alone create no file.
    assert isinstance(eff.store, dejacache.Store)
    assert eff.store.url == eff.source == f"sqlite:///{db}"
    assert not (tmp_path / ".dejacache").exists()
    assert isinstance(config.settings_object().default_store(), dejacache.SQLiteStore)
    assert db.exists()
    assert MODES == ("auto", "replay", "record", "off")


def _opened(store: dejacache.Store) -> dejacache.Store:
    """The real store behind the lazily opened default one."""
    opened = store.open() if isinstance(store, config._DefaultStore) else store
    return opened


def test_works_with_no_configuration_at_all(tmp_path: pathlib.Path) -> None:
    f, calls = _counter()
    assert f(1) == f(1) == 2
    assert calls == [1]
    # Persisted in SQLite under DEJACACHE_DIR (the fixture points it into tmp_path).
    assert (tmp_path / ".dejacache" / "cache.db").exists()
    config.reset()  # a new process, as far as settings go
    f2, calls2 = _counter()
    assert f2(1) == 2
    assert calls2 == []


def test_empty_dejacache_dir_means_no_persistence(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEJACACHE_DIR", "")
    monkeypatch.chdir(tmp_path)
    assert default_cache_dir() is None
    assert get_settings().store.url == "memory://"
    assert isinstance(_opened(get_settings().store), dejacache.MemoryStore)
    f, calls = _counter()
    assert f(3) == f(3) == 6
    assert calls == [3]
    assert not any(tmp_path.rglob("*.db"))


def test_default_dir_is_project_root(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEJACACHE_DIR")
    (tmp_path / "pyproject.toml").write_text("")
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert default_cache_dir() == tmp_path.resolve() / ".dejacache"


def test_resolve_mode() -> None:
    assert resolve_mode(" Replay ") == "replay"
    with pytest.raises(ConfigurationError, match="unknown mode 'fast'"):
        resolve_mode("fast")


@pytest.mark.parametrize("make", [
    lambda: dejacache.cassette("a.json", mode=3),  # type: ignore[arg-type]
    lambda: dejacache.scope(mode=3),  # type: ignore[arg-type]
])
def test_a_mode_that_is_not_text_is_refused_naming_it(make: Any) -> None:
    with pytest.raises(ConfigurationError, match="mode must be a string, one of auto, "
                                                 "replay, record, off, not 3"):
        make()


def test_mode_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    assert current().mode == "auto"
    monkeypatch.setenv("DEJACACHE_MODE", "record")
    config.reset()
    assert current().mode == "record"
    configure(mode="off")
    assert current().mode == "off"
    with dejacache.scope(mode="replay"):
        assert current().mode == "replay"
        with dejacache.scope(cache_key="inner"):
            assert current().mode == "replay"  # inherited from the outer block
    assert current().mode == "off"
    configure(mode=None)  # back to the environment
    assert current().mode == "record"


@pytest.mark.parametrize("written", ["none", "None"])
def test_vcrpys_none_is_replay_in_every_setter(monkeypatch: pytest.MonkeyPatch,
                                               written: str) -> None:
    monkeypatch.setenv("DEJACACHE_MODE", written)
    config.reset()
    assert current().mode == "replay"
    configure(mode=written)
    assert current().mode == "replay"
    configure(mode="off")
    with dejacache.scope(mode=written):
        assert current().mode == "replay"
    assert resolve_mode(written) == "replay"


def test_bad_env_mode_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJACACHE_MODE", "sometimes")
    config.reset()
    with pytest.raises(ConfigurationError, match="DEJACACHE_MODE"):
        get_settings()


def test_an_exponential_volatile_pattern_names_the_variable_or_the_argument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pattern like ``(a+)+$`` took 7 s on a 25-character argument, on every call: it is
    refused, naming the pattern and where it was written."""
    monkeypatch.setenv("DEJACACHE_VOLATILE", "trace_id\nre:(a+)+$")
    config.reset()
    with pytest.raises(ConfigurationError, match=r"DEJACACHE_VOLATILE.*'\(a\+\)\+\$'.*exponential"):
        get_settings()
    monkeypatch.delenv("DEJACACHE_VOLATILE")
    config.reset()
    with pytest.raises(ConfigurationError, match=r"volatile=.*'\(a\+\)\+\$'"):
        configure(volatile=["re:(a+)+$"])
    with pytest.raises(ConfigurationError, match=r"volatile=.*exponential"):
        dejacache.cache(volatile=[__import__("re").compile(r"(\w+\s?)+$")])


def test_cache_key_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJACACHE_CACHE_KEY", "from-env")
    config.reset()
    assert current().namespace == "from-env"
    configure(cache_key="suite-v1")
    assert current().namespace == "suite-v1"
    with dejacache.scope(cache_key="happy-path-v1"):
        assert current().namespace == "happy-path-v1"
    with dejacache.scope(cache_key=None):
        assert current().namespace is None
    configure(cache_key=None)
    assert current().namespace is None


def test_namespaces_isolate_entries(memory_store: dejacache.MemoryStore) -> None:
    f, calls = _counter()
    configure(cache_key="v1")
    f(1)
    configure(cache_key="v2")
    f(1)
    f(1)
    assert calls == [1, 1]
    with dejacache.scope(cache_key="v1"):
        f(1)
    assert calls == [1, 1]


def test_cache_key_none_disables_caching(memory_store: dejacache.MemoryStore) -> None:
    f, calls = _counter()
    configure(cache_key=None)
    f(1)
    f(1)
    assert calls == [1, 1]
    assert list(memory_store.iterate()) == []


@pytest.mark.parametrize(
    ("url", "kind"),
    [("memory://", dejacache.MemoryStore), ("sqlite:///{tmp}/x/cache.db", dejacache.SQLiteStore)],
)
def test_configure_store_urls(tmp_path: pathlib.Path, url: str, kind: type) -> None:
    configure(store=url.format(tmp=tmp_path))
    store = get_settings().store
    assert isinstance(store, kind)
    f, calls = _counter()
    f(5)
    f(5)
    assert calls == [5]
    if kind is dejacache.SQLiteStore:
        assert (tmp_path / "x" / "cache.db").exists()
    store.close()


def test_configure_store_instance_and_back_to_default() -> None:
    mem = dejacache.MemoryStore()
    configure(store=mem)
    assert get_settings().store is mem
    configure(store=None)
    assert isinstance(_opened(get_settings().store), dejacache.SQLiteStore)


@pytest.mark.parametrize("bad", ["ftp://x", "nonsense", 42])
def test_bad_store_is_a_configuration_error(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        configure(store=bad)
    with pytest.raises(ConfigurationError):
        dejacache.scope(store=bad)


def test_bad_mode_in_configure_and_scope() -> None:
    with pytest.raises(ConfigurationError):
        configure(mode="sometimes")
    with pytest.raises(ConfigurationError):
        dejacache.scope(mode="sometimes")


def test_configure_keeps_unmentioned_settings() -> None:
    mem = dejacache.MemoryStore()
    configure(cache_key="a", mode="record", store=mem)
    configure(cache_key="b")
    eff = get_settings()
    assert (eff.namespace, eff.mode, eff.store) == ("b", "record", mem)


def test_effective_source_names_the_store(tmp_path: pathlib.Path) -> None:
    configure(store=dejacache.MemoryStore())
    assert get_settings().source == "memory://"


def test_the_default_store_opens_on_first_use_only(tmp_path: pathlib.Path) -> None:
    # Settings, scopes and cassette blocks with their own store used to
    # create <DEJACACHE_DIR>/cache.db just by computing the global settings.
    import pickle

    cache_dir = tmp_path / ".dejacache"
    eff = get_settings()
    with dejacache.scope(store=dejacache.MemoryStore()), dejacache.scope(cache_key="x"):
        pass
    store = eff.store
    assert isinstance(store, config._DefaultStore)
    assert config.settings_object()._default_store is None
    assert pickle.loads(pickle.dumps(store)).url == store.url  # another process: its own
    store.close()  # closing what was never opened opens nothing
    assert "not opened yet" in repr(store)
    assert not cache_dir.exists()
    assert store.get("k") is None
    real = config.settings_object()._default_store
    assert isinstance(real, dejacache.SQLiteStore)
    assert (cache_dir / "cache.db").exists()
    # From now on the hit path calls the real store directly, and optional features forward.
    assert store.get == real.get and store.put == real.put
    assert store.incr("gen") == real.get_counters(["gen"])[0]  # type: ignore[attr-defined]
    # and the settings hand out the real store (no __getattr__ on the engine's probes).
    assert get_settings().store is real
    with dejacache.scope(cache_key="y"):
        assert current().store is real


def _duration_settings(tmp_path: pathlib.Path) -> dict[str, Any]:
    """Every setting that takes a duration: name -> function(value) -> the seconds it keeps
    (None where they are not kept on an object: ``@cache`` hands them to each write)."""

    def redis(attr: str, kept: str) -> Any:
        def build(v: Any) -> float:
            from dejacache.stores.redis import RedisStore

            store = RedisStore("redis://127.0.0.1:1/0", **{attr: v})  # builds, connects never
            return float(getattr(store.breaker if kept else store, kept or attr))
        return build

    def sqlite(v: Any) -> float:
        store = dejacache.SQLiteStore(tmp_path / "d.db", timeout=v)
        store.close()
        return float(store.timeout)

    return {
        "@cache ttl": lambda v: dejacache.cache(ttl=v) and None,
        "tool_cache ttl": lambda v: dejacache.tool_cache(ttl=v)(lambda: 1).tool_cache.ttl,
        "tool_cache counter_max_age": lambda v: dejacache.tool_cache(counter_max_age=v)(
            lambda: 1).tool_cache.counter_max_age,
        "AgentPool idle_ttl": lambda v: dejacache.AgentPool(dict, idle_ttl=v).idle_ttl,
        "TieredStore front_ttl": lambda v: dejacache.TieredStore(
            dejacache.MemoryStore(), dejacache.MemoryStore(), front_ttl=v).front_ttl,
        "SQLiteStore timeout": sqlite,
        "RedisStore timeout": redis("timeout", ""),
        "RedisStore connect_timeout": redis("connect_timeout", ""),
        "RedisStore failure_budget": redis("failure_budget", "budget"),  # kept by the breaker
        "RedisStore cooldown": redis("cooldown", "cooldown"),
    }


def test_every_duration_setting_takes_the_same_forms(tmp_path: pathlib.Path) -> None:
    """One rule wherever a duration is given: seconds, a timedelta or text, and a value that
    is none of them is refused right there, naming the setting and the value."""
    import datetime

    pytest.importorskip("redis")
    for what, give in _duration_settings(tmp_path).items():
        assert give("1m30s") in (90.0, None), what
        assert give(datetime.timedelta(milliseconds=250)) in (0.25, None), what
        with pytest.raises(ConfigurationError, match=f"{what} must be a duration") as info:
            give("soon")
        assert "'soon'" in str(info.value), what


@pytest.mark.parametrize(("spec", "warned"), [("body.nonexistent_root.x", True),
                                              ("body.model,request.x", False)])
def test_global_volatile_paths_are_checked_when_the_process_exits(
        tmp_path: pathlib.Path, spec: str, warned: bool) -> None:
    """``configure``/``DEJACACHE_VOLATILE`` paths belong to no block: a path some call tried
    and none matched in the whole process is reported at exit."""
    import os
    import subprocess
    import sys

    script = ("import dejacache\n"
              "@dejacache.cache\n"
              "def chat(body):\n"
              "    return len(body)\n"
              "chat({'model': 'm', 'messages': []})\n"
              "chat({'model': 'n', 'messages': []})\n")
    env = {**os.environ, "DEJACACHE_VOLATILE": spec, "DEJACACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    assert ("volatile path 'body.nonexistent_root.x' from DEJACACHE_VOLATILE never matched"
            in out.stderr) is warned, out.stderr
    assert "request.x" not in out.stderr  # never tried: no call had a ``request``


# ---------------------------------------------------------------- the project file


@pytest.fixture
def project_dir(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """The current directory is a project of its own, outside this session's project."""
    from dejacache import _project

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEJACACHE_PROJECT", raising=False)
    monkeypatch.setattr(_project, "_OVERRIDE", [None])
    return tmp_path


def test_configure_names_the_setting_a_misspelt_argument_meant() -> None:
    with pytest.raises(ConfigurationError, match="no setting 'volatil'; did you mean "
                                                 "'volatile'"):
        dejacache.configure(volatil=["x"])  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match="'allow_hosts' is a project setting"):
        dejacache.configure(allow_hosts=["x"])  # type: ignore[call-arg]


@pytest.mark.parametrize("bad", [0, -1, "64MiB", 1.5, True])
def test_max_recorded_stream_is_a_whole_number_as_the_proxys_flag(bad: object) -> None:
    from dejacache.proxying._config import limit_count

    with pytest.raises(ConfigurationError) as given:
        dejacache.configure(max_recorded_stream=bad)  # type: ignore[arg-type]
    assert str(given.value) == f"max_recorded_stream={bad!r}: expected a whole number > 0"
    with pytest.raises(ConfigurationError) as flag:  # one rule: the proxy's flag says alike
        limit_count("--max-recorded-stream", bad, 1)
    assert str(flag.value) == f"--max-recorded-stream {bad!r}: expected a whole number > 0"
    assert config.settings_object().max_recorded_stream is None  # nothing half-set


def test_configure_refuses_a_misspelt_key_in_the_project_file(project_dir: pathlib.Path
                                                              ) -> None:
    (project_dir / "pyproject.toml").write_text("[tool.dejacache]\nmodes = 'replay'\n")
    with pytest.raises(ConfigurationError, match="unknown key 'modes'; did you mean 'mode'"):
        dejacache.configure(cache_key="ns")


def test_project_volatile_and_mode_apply_below_the_environment_and_configure(
        project_dir: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project_dir / "pyproject.toml").write_text(
        "[tool.dejacache]\nvolatile = ['re:\\d{4}-\\d{2}-\\d{2}']\nmode = 'off'\n")
    calls: list[str] = []

    @dejacache.cache
    def f(note: str) -> int:
        calls.append(note)
        return len(calls)

    config.reset()
    eff = config.get_settings()
    assert (eff.volatile, eff.mode) == ((r"re:\d{4}-\d{2}-\d{2}",), "off")
    monkeypatch.setenv("DEJACACHE_MODE", "auto")
    config.reset()
    dejacache.configure(store=dejacache.MemoryStore())
    assert f("on 2026-01-01") == f("on 2030-12-31") == 1  # the project's pattern keys alike
    monkeypatch.setenv("DEJACACHE_VOLATILE", "body.x")  # the environment replaces it
    config.reset()
    assert config.get_settings().volatile == ("body.x",)
    dejacache.configure(volatile=["y"])  # and configure() replaces both
    assert config.get_settings().volatile == ("y",)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "64MiB"])
def test_max_ws_message_is_a_whole_number_named_when_wrong(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"max_ws_message=.*whole number > 0"):
        dejacache.configure(max_ws_message=bad)


def test_max_ws_message_is_read_by_a_session_at_its_start() -> None:
    from dejacache.ws._drive import SyncSession
    from dejacache.ws._message import MAX_MESSAGE, Handshake

    def bound() -> int:
        hs = Handshake("ws://127.0.0.1:1/", [])
        return SyncSession(current(), hs, None).max_message

    assert bound() == MAX_MESSAGE
    dejacache.configure(max_ws_message=2**27)
    assert bound() == 2**27
    dejacache.configure(max_ws_message=None)
    assert bound() == MAX_MESSAGE
