"""@tool_cache: per-argument caching, tenant isolation by construction, what is never cached."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import re
import threading
import unicodedata
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import dejacache
from dejacache.runtime import current_session


@dejacache.tool_cache(resource="whoami", store=dejacache.MemoryStore(maxsize=100_000))
def shared_whoami() -> str:  # module level: shared by every Hypothesis example
    sess = current_session()
    assert sess is not None and sess.tenant is not None
    return sess.tenant


def counting(result: Any = None) -> tuple[list[Any], Any]:
    calls: list[Any] = []

    def origin(*args: Any) -> Any:
        calls.append(args)
        return result if result is not None else {"n": len(calls), "args": list(args)}

    return calls, origin


def test_caches_per_canonical_arguments() -> None:
    calls: list[tuple[Any, ...]] = []

    @dejacache.tool_cache(resource="weather")
    def forecast(city: str, days: int = 3) -> dict[str, Any]:
        calls.append((city, days))
        return {"city": city, "days": days}

    with dejacache.agent_session(tenant="acme"):
        assert forecast("Oslo") == {"city": "Oslo", "days": 3}
        assert forecast("Oslo", 3) == {"city": "Oslo", "days": 3}
        assert forecast(city="Oslo", days=3) == {"city": "Oslo", "days": 3}
        assert forecast("Oslo", days=4) == {"city": "Oslo", "days": 4}
        assert forecast("Rome") == {"city": "Rome", "days": 3}
    assert calls == [("Oslo", 3), ("Oslo", 4), ("Rome", 3)]
    st = dejacache.runtime_stats().by_tool["forecast"]
    assert (st.hits, st.misses) == (2, 3)


def test_a_tool_method_keys_its_instance() -> None:
    # Two services over two databases: one answer each, not the first one's for both.
    calls: list[tuple[str, str]] = []

    class Carts:
        __dejacache_key__ = ("db",)

        def __init__(self, db: str) -> None:
            self.db = db

        @dejacache.tool_cache(resource="carts", scope="global")
        def get_cart(self, user: str) -> str:
            calls.append((self.db, user))
            return f"{self.db}:{user}"

    @dataclasses.dataclass
    class Prices:
        region: str

        @dejacache.tool_cache(resource="prices", scope="global", key_self=True)
        def price(self, sku: str) -> str:
            calls.append((self.region, sku))
            return f"{self.region}:{sku}"

    @dataclasses.dataclass
    class Fields:
        region: str

        @dejacache.tool_cache(resource="fields", scope="global")  # no hook: its fields
        def price(self, sku: str) -> str:
            calls.append((self.region, sku))
            return f"{self.region}:{sku}"

    @dataclasses.dataclass
    class Shared:
        region: str

        @dejacache.tool_cache(resource="shared", scope="global", key_self=False)  # one answer
        def price(self, sku: str) -> str:
            calls.append((self.region, sku))
            return f"{self.region}:{sku}"

    for _ in range(2):
        assert [Carts("eu").get_cart("ann"), Carts("us").get_cart("ann")] == [
            "eu:ann", "us:ann"]
        assert [Prices("eu").price("x"), Prices("us").price("x")] == ["eu:x", "us:x"]
        assert [Fields("eu").price("x"), Fields("us").price("x")] == ["eu:x", "us:x"]
        assert [Shared("eu").price("x"), Shared("us").price("x")] == ["eu:x", "eu:x"]
    assert calls == [("eu", "ann"), ("us", "ann"), ("eu", "x"), ("us", "x"), ("eu", "x"),
                     ("us", "x"), ("eu", "x")]


def test_tracing_like_argument_names_are_part_of_the_key() -> None:
    """``request_id`` is volatile for LLM requests, but a tool's argument of that name is data."""

    @dejacache.tool_cache(resource="tickets")
    def get_ticket(request_id: str, trace_id: str = "") -> str:
        return f"{request_id}/{trace_id}"

    with dejacache.agent_session(tenant="acme"):
        assert get_ticket("r1") == "r1/"
        assert get_ticket("r2") == "r2/"
        assert get_ticket("r2", trace_id="t") == "r2/t"


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1), st.text(min_size=1))
def test_hypothesis_two_tenants_never_see_each_others_results(a: str, b: str) -> None:
    assume(a != b)
    for tenant in (a, b, a, b):  # the second round are hits
        with dejacache.agent_session(tenant=tenant):
            assert shared_whoami() == tenant


def test_hits_return_independent_copies() -> None:
    @dejacache.tool_cache
    def items() -> list[int]:
        return [1, 2]

    with dejacache.agent_session(tenant="acme"):
        first = items()
        first.append(99)
        second = items()
        second.append(100)
        assert items() == [1, 2]


@dataclasses.dataclass
class Cart:
    user: int
    skus: tuple[str, ...]


def test_typed_results_round_trip() -> None:
    @dejacache.tool_cache(resource="cart")
    def cart(user: int) -> Cart:
        return Cart(user, ("a", "b"))

    with dejacache.agent_session(tenant="acme"):
        cart(1)
        hit = cart(1)
    assert hit == Cart(1, ("a", "b"))
    assert dejacache.runtime_stats().by_tool["cart"].hits == 1


async def test_async_tool() -> None:
    calls = []

    @dejacache.tool_cache(resource="cart", key="cart:{user_id}")
    async def get_cart(user_id: int) -> dict[str, int]:
        calls.append(user_id)
        await asyncio.sleep(0)
        return {"user": user_id}

    async with dejacache.agent_session(tenant="acme"):
        assert await get_cart(1) == {"user": 1}
        assert await get_cart(1) == {"user": 1}
        assert await get_cart(2) == {"user": 2}
    assert calls == [1, 2]


# ---------------------------------------------------------------- tenant isolation


def test_tenant_tool_outside_session_raises_scope_error() -> None:
    @dejacache.tool_cache(resource="cart")
    def get_cart(user_id: int) -> int:
        return user_id

    with pytest.raises(dejacache.ScopeError, match="agent_session"):
        get_cart(1)


def test_session_tool_in_tenantless_session_raises() -> None:
    @dejacache.tool_cache(resource="notes", scope="session")
    def notes() -> str:
        return "x"

    with dejacache.agent_session(session_id="s1"), pytest.raises(
        dejacache.ScopeError, match="without a tenant"
    ):
        notes()


async def test_async_tenant_tool_outside_session_raises() -> None:
    @dejacache.tool_cache(resource="cart")
    async def get_cart(user_id: int) -> int:
        return user_id

    with pytest.raises(dejacache.ScopeError):
        await get_cart(1)


def test_tenants_never_share_results() -> None:
    @dejacache.tool_cache(resource="profile")
    def whoami() -> str:
        sess = current_session()
        assert sess is not None and sess.tenant is not None
        return sess.tenant

    tenants = ["a/b", "a%2Fb", "../a", "a\x00", "a", "é", unicodedata.normalize("NFD", "é"),
               "x" * 5000, "x" * 5001, "t/s", "t%2Fs"]
    for _ in range(2):  # the second round is all hits: each must be the tenant's own value
        for t in tenants:
            with dejacache.agent_session(tenant=t):
                assert whoami() == t
    st = dejacache.runtime_stats().by_tool["whoami"]
    assert (st.hits, st.misses) == (len(tenants), len(tenants))


def test_session_scope_isolates_sessions_of_one_tenant() -> None:
    @dejacache.tool_cache(resource="scratch", scope="session")
    def scratch() -> str:
        sess = current_session()
        assert sess is not None
        return sess.session_id

    with dejacache.agent_session(tenant="acme", session_id="s1"):
        assert scratch() == "s1"
    with dejacache.agent_session(tenant="acme", session_id="s2"):
        assert scratch() == "s2"
    with dejacache.agent_session(tenant="acme", session_id="s1"):
        assert scratch() == "s1"
    assert dejacache.runtime_stats().by_tool["scratch"].hits == 1


def test_tenant_scope_shared_between_sessions_of_one_tenant() -> None:
    calls, origin = counting()
    tool = dejacache.tool_cache(resource="catalog", name="catalog")(lambda: origin())
    with dejacache.agent_session(tenant="acme", session_id="s1"):
        tool()
    with dejacache.agent_session(tenant="acme", session_id="s2"):
        tool()
    assert len(calls) == 1


def test_global_scope_works_outside_sessions_and_is_shared() -> None:
    calls = []

    @dejacache.tool_cache(resource="fx", scope="global")
    def rate(pair: str) -> float:
        calls.append(pair)
        return 1.1

    assert rate("EURUSD") == 1.1
    with dejacache.agent_session(tenant="a"):
        assert rate("EURUSD") == 1.1
    with dejacache.agent_session(tenant="b"):
        assert rate("EURUSD") == 1.1
    assert calls == ["EURUSD"]


def test_bare_threads_do_not_inherit_the_session() -> None:
    @dejacache.tool_cache(resource="cart")
    def get_cart() -> str:
        return "x"

    box: list[BaseException] = []

    def worker() -> None:
        try:
            get_cart()
        except BaseException as exc:
            box.append(exc)

    with dejacache.agent_session(tenant="acme"):
        t = threading.Thread(target=worker)
        t.start()
        t.join(5)
        # With the caller's context carried explicitly, the thread is the same tenant.
        ctx = contextvars.copy_context()
        t2 = threading.Thread(target=lambda: ctx.run(get_cart))
        t2.start()
        t2.join(5)
        dejacache.propagate(get_cart)()
    assert len(box) == 1 and isinstance(box[0], dejacache.ScopeError)


def test_bare_thread_not_routed_even_with_a_test_scope_active() -> None:
    """A test-facing block routes context-less threads to it; a session must not leak so."""

    @dejacache.tool_cache(resource="cart")
    def get_cart() -> str:
        return "x"

    box: list[BaseException] = []

    def worker() -> None:
        try:
            get_cart()
        except BaseException as exc:
            box.append(exc)

    with dejacache.scope(cache_key="t"), dejacache.agent_session(tenant="acme"):
        t = threading.Thread(target=worker)
        t.start()
        t.join(5)
    assert len(box) == 1 and isinstance(box[0], dejacache.ScopeError)


# ---------------------------------------------------------------- never cached


def test_exceptions_are_not_cached() -> None:
    calls = []

    @dejacache.tool_cache
    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return "ok"

    with dejacache.agent_session(tenant="acme"):
        with pytest.raises(RuntimeError):
            flaky()
        assert flaky() == "ok"
        assert flaky() == "ok"
    assert len(calls) == 2


class McpResult:
    def __init__(self, text: str, is_error: bool) -> None:
        self.text = text
        self.isError = is_error


@pytest.mark.parametrize(
    "result",
    [{"is_error": True, "message": "not found"}, {"isError": True, "content": []},
     McpResult("nope", True)],
    ids=["is_error-key", "isError-key", "isError-attr"],
)
def test_error_results_are_not_cached(result: Any) -> None:
    calls = []

    @dejacache.tool_cache(name="lookup_err")
    def lookup() -> Any:
        calls.append(1)
        return result

    with dejacache.agent_session(tenant="acme"):
        assert lookup() is result
        assert lookup() is result
    assert len(calls) == 2
    assert dejacache.runtime_stats().by_tool["lookup_err"].not_cached == 2


def test_falsy_is_error_is_cached() -> None:
    calls = []

    @dejacache.tool_cache
    def ok() -> dict[str, Any]:
        calls.append(1)
        return {"is_error": False, "content": "fine"}

    with dejacache.agent_session(tenant="acme"):
        ok()
        ok()
    assert len(calls) == 1


def test_values_over_max_bytes_are_not_cached() -> None:
    calls = []

    @dejacache.tool_cache(max_bytes=100)
    def big(n: int) -> str:
        calls.append(n)
        return "x" * n

    with dejacache.agent_session(tenant="acme"):
        big(10)
        big(10)
        big(1000)
        big(1000)
    assert calls == [10, 1000, 1000]


def test_unencodable_results_are_served_and_warned_once() -> None:
    calls = []

    class Opaque:
        pass

    @dejacache.tool_cache(name="opaque_tool")
    def opaque() -> Opaque:
        calls.append(1)
        return Opaque()

    with dejacache.agent_session(tenant="acme"):
        with pytest.warns(dejacache.DejacacheWarning, match="not cached"):
            a = opaque()
        b = opaque()
    assert isinstance(a, Opaque) and isinstance(b, Opaque)
    assert len(calls) == 2


def test_results_that_cannot_be_rebuilt_are_not_cached() -> None:
    @dataclasses.dataclass
    class Local:  # defined in a function: the codec cannot name it to rebuild it
        x: int

    calls = []

    @dejacache.tool_cache(name="local_tool")
    def tool() -> Local:
        calls.append(1)
        return Local(1)

    with dejacache.agent_session(tenant="acme"):
        with pytest.warns(dejacache.DejacacheWarning, match="not cached"):
            assert tool() == Local(1)
        assert tool() == Local(1)
    assert len(calls) == 2
    assert len(tool.tool_cache.store()) == 0  # type: ignore[attr-defined]


def test_generators_are_refused() -> None:
    with pytest.raises(dejacache.ConfigurationError, match="generators"):

        @dejacache.tool_cache
        def gen() -> Any:
            yield 1


def test_bad_scope_and_template_fail_at_decoration() -> None:
    with pytest.raises(dejacache.ConfigurationError, match="scope"):
        dejacache.tool_cache(scope="tenants")(lambda: 1)
    with pytest.raises(dejacache.ConfigurationError, match="user"):

        @dejacache.tool_cache(key="cart:{user}")
        def get_cart(user_id: int) -> int:
            return user_id


def test_unbound_arguments_raise_the_tools_own_error() -> None:
    @dejacache.tool_cache(key="cart:{user_id}")
    def get_cart(user_id: int) -> int:
        return user_id

    with dejacache.agent_session(tenant="acme"), pytest.raises(TypeError):
        get_cart()  # type: ignore[call-arg]


# ---------------------------------------------------------------- stores


def test_default_is_a_private_in_process_store_not_the_test_default() -> None:
    @dejacache.tool_cache
    def tool() -> int:
        return 1

    with dejacache.agent_session(tenant="acme"):
        tool()
    tc = tool.tool_cache  # type: ignore[attr-defined]
    assert isinstance(tc.store(), dejacache.MemoryStore)
    assert len(tc.store()) == 1
    # The test-facing default store (SQLite on disk) was never touched.
    assert dejacache.config.settings_object()._default_store is None


def test_maxsize_bounds_the_in_process_store() -> None:
    @dejacache.tool_cache(maxsize=3)
    def tool(i: int) -> int:
        return i

    with dejacache.agent_session(tenant="acme"):
        for i in range(10):
            tool(i)
    assert len(tool.tool_cache.store()) == 3  # type: ignore[attr-defined]


def test_configured_store_is_used_and_per_tool_store_overrides() -> None:
    configured = dejacache.MemoryStore()
    own = dejacache.MemoryStore()
    dejacache.configure(store=configured)

    @dejacache.tool_cache
    def a() -> int:
        return 1

    @dejacache.tool_cache(store=own)
    def b() -> int:
        return 2

    with dejacache.agent_session(tenant="acme"):
        a()
        b()
    assert len(configured) == 1 and len(own) == 1


def test_configured_sqlite_store_is_used_for_runtime(tmp_path: Any) -> None:
    store = dejacache.SQLiteStore(tmp_path / "rt.db")
    dejacache.configure(store=store)

    @dejacache.tool_cache(resource="cart", key="cart:{u}")
    def get_cart(u: int) -> dict[str, int]:
        return {"u": u}

    with dejacache.agent_session(tenant="acme"):
        get_cart(1)
        assert get_cart(1) == {"u": 1}
    assert dejacache.runtime_stats().by_tool["get_cart"].hits == 1
    assert [r.kind for _, r in store.iterate()] == ["tool"]
    store.close()


class SequencedStore(dejacache.MemoryStore):
    sequenced = True  # what cassettes declare: the n-th identical call gets the n-th answer


def test_a_configured_cassette_like_store_is_not_used_for_runtime() -> None:
    cassette = SequencedStore()
    dejacache.configure(store=cassette)

    @dejacache.tool_cache
    def tool() -> int:
        return 1

    with dejacache.agent_session(tenant="acme"):
        tool()
        tool()
    assert len(cassette) == 0
    assert len(tool.tool_cache.store()) == 1  # type: ignore[attr-defined]


def test_runtime_cache_ignores_test_modes_and_scopes() -> None:
    calls = []

    @dejacache.tool_cache
    def tool() -> int:
        calls.append(1)
        return 1

    with dejacache.scope(mode="replay", cache_key="x"), dejacache.agent_session(tenant="a"):
        tool()
        tool()
    dejacache.configure(mode="off")
    with dejacache.agent_session(tenant="a"):
        tool()
    assert calls == [1]


def test_ttl_expires_entries() -> None:
    calls = []

    @dejacache.tool_cache(ttl=0.0001)
    def tool() -> int:
        calls.append(1)
        return 1

    with dejacache.agent_session(tenant="a"):
        tool()
        import time

        time.sleep(0.01)
        tool()
    assert len(calls) == 2


def test_damaged_entry_is_a_miss_and_deleted() -> None:
    store = dejacache.MemoryStore()

    @dejacache.tool_cache(store=store)
    def tool() -> int:
        return 7

    with dejacache.agent_session(tenant="a"):
        tool()
        (key, rec), = list(store.iterate())
        with pytest.warns(dejacache.DejacacheWarning, match="damaged"):  # refused on put
            store.put(key, dataclasses.replace(rec, value=rec.value[:-1] + b"9"))
        assert tool() == 7
    assert dejacache.runtime_stats().by_tool["tool"].misses == 2


def test_store_key_carries_the_encoded_tenant_prefix() -> None:
    store = dejacache.MemoryStore()

    @dejacache.tool_cache(store=store, resource="cart")
    def tool() -> int:
        return 7

    with dejacache.agent_session(tenant="../evil/x"):
        tool()
    (key, _), = list(store.iterate())
    assert key.startswith("rt1/t/%2E%2E%2Fevil%2Fx/cart/")
    assert "/../" not in key


@pytest.mark.parametrize(("ttl", "seconds"), [("5m", 300.0), ("1h30m", 5400.0), (90, 90.0)])
def test_ttl_takes_durations(ttl: Any, seconds: float) -> None:
    @dejacache.tool_cache(ttl=ttl, counter_max_age="0s")
    def tool() -> int:
        return 1

    assert tool.tool_cache.ttl == seconds  # type: ignore[attr-defined]
    with dejacache.agent_session(tenant="a"):
        assert tool() == tool() == 1
    assert dejacache.runtime_stats().by_tool["tool"].hits == 1


@pytest.mark.parametrize(("kw", "value"), [("ttl", "soon"), ("ttl", 0), ("ttl", "-1h"),
                                           ("counter_max_age", "later"),
                                           ("counter_max_age", -1.0)])
def test_a_duration_that_is_no_duration_is_refused_at_decoration(kw: str, value: Any) -> None:
    with pytest.raises(dejacache.ConfigurationError, match=kw) as info:
        dejacache.tool_cache(**{kw: value})(lambda: 1)
    assert repr(value) in str(info.value)


@pytest.mark.parametrize(("url", "kind"), [("memory://", dejacache.MemoryStore),
                                           ("sqlite:///{tmp}/rt.db", dejacache.SQLiteStore)])
def test_store_takes_the_urls_configure_takes(tmp_path: Any, url: str, kind: type) -> None:
    url = url.format(tmp=tmp_path)
    calls: list[int] = []

    @dejacache.tool_cache(resource="cart", store=url)
    def get_cart() -> int:
        calls.append(1)
        return len(calls)

    @dejacache.invalidates("cart", store=url)
    def add_item() -> None:
        return None

    assert isinstance(get_cart.tool_cache.store(), kind)  # type: ignore[attr-defined]
    with dejacache.agent_session(tenant="a"):
        assert get_cart() == get_cart() == 1
        add_item()
        assert get_cart() == 2  # the write reached the counters the reader keys by
    get_cart.tool_cache.store().close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("bad", ["ftp://x", "nonsense", 42])
def test_a_bad_store_is_refused_as_configure_refuses_it(bad: Any) -> None:
    with pytest.raises(dejacache.ConfigurationError) as expected:
        dejacache.configure(store=bad)
    with pytest.raises(dejacache.ConfigurationError) as info:
        dejacache.tool_cache(store=bad)(lambda: 1)
    assert str(info.value) == str(expected.value)


# The runtime cache's switch: the environment, configure(), per tool.


def _cart_tools() -> tuple[Any, Any, dict[int, int]]:
    db = {1: 0}

    @dejacache.tool_cache(resource="cart", key="cart:{u}")
    def get_cart(u: int) -> int:
        return db[u]

    @dejacache.invalidates("cart", key="cart:{u}")
    def add(u: int) -> None:
        db[u] += 1

    return get_cart, add, db


def _runs(fn: Any, n: int) -> int:
    before = dejacache.runtime_stats().total
    for _ in range(n):
        fn(1)
    after = dejacache.runtime_stats().total
    return (after.misses + after.off + after.bypassed) - (
        before.misses + before.off + before.bypassed)


def test_configure_switches_the_runtime_cache_off_and_on() -> None:
    get_cart, add, db = _cart_tools()
    with dejacache.agent_session(tenant="acme"):
        assert _runs(get_cart, 3) == 1 and dejacache.runtime_stats().enabled
        dejacache.configure(runtime_cache=False)
        assert _runs(get_cart, 3) == 3  # every call runs the tool
        st = dejacache.runtime_stats()
        assert not st.enabled and st.by_tool["get_cart"].off == 3
        assert [c.outcome for c in current_session().calls][-1] == "off"
        add(1)  # writes still invalidate while it is off
        dejacache.configure(runtime_cache=None)  # back to the environment: on
        assert get_cart(1) == db[1] == 1  # nothing older than the write is served
        assert _runs(get_cart, 3) == 0 and dejacache.runtime_stats().enabled


async def test_the_switch_holds_for_async_tools() -> None:
    @dejacache.tool_cache(resource="n")
    async def get(i: int) -> int:
        return i

    dejacache.configure(runtime_cache=False)
    async with dejacache.agent_session(tenant="acme"):
        for _ in range(3):
            assert await get(1) == 1
    st = dejacache.runtime_stats().by_tool["get"]
    assert (st.off, st.hits, st.misses) == (3, 0, 0)


@pytest.mark.parametrize(("value", "on"), [("off", False), ("0", False), ("false", False),
                                           ("on", True), ("1", True), ("", True)])
def test_the_environment_switches_it(monkeypatch: pytest.MonkeyPatch, value: str,
                                     on: bool) -> None:
    monkeypatch.setenv("DEJACACHE_RUNTIME_CACHE", value)
    dejacache.configure()  # read again at the next configuration
    get_cart, _, _ = _cart_tools()
    with dejacache.agent_session(tenant="acme"):
        assert _runs(get_cart, 3) == (1 if on else 3)
    assert dejacache.runtime_stats().enabled is on
    dejacache.configure(runtime_cache=True)  # configure() wins over the environment
    assert dejacache.runtime_stats().enabled


def test_an_unreadable_environment_value_switches_it_off_and_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEJACACHE_RUNTIME_CACHE", "disabled")
    dejacache.configure()
    with pytest.warns(dejacache.DejacacheWarning, match="DEJACACHE_RUNTIME_CACHE"):
        assert not dejacache.runtime_stats().enabled


def test_one_tool_switched_off() -> None:
    @dejacache.tool_cache(resource="a", enabled=False)
    def off(i: int) -> int:
        return i

    @dejacache.tool_cache(resource="b")
    def on(i: int) -> int:
        return i

    with dejacache.agent_session(tenant="acme"):
        assert _runs(off, 3) == 3 and _runs(on, 3) == 1
        off.tool_cache.enabled = True  # type: ignore[attr-defined]
        assert _runs(off, 3) == 1
    st = dejacache.runtime_stats()
    assert st.enabled and st.by_tool["off"].off == 3


def test_runtime_cache_must_be_a_bool() -> None:
    with pytest.raises(dejacache.ConfigurationError, match="runtime_cache"):
        dejacache.configure(runtime_cache="off")  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"maxsize": "5"}, "tool_cache maxsize must be an int >= 1, not '5'"),
    ({"maxsize": 0}, "tool_cache maxsize must be an int >= 1, not 0"),
    ({"max_bytes": "1mb"}, "tool_cache max_bytes must be an int >= 1, not '1mb'"),
])
def test_bad_bounds_are_refused_at_decoration(kwargs: dict[str, object], message: str) -> None:
    # A str maxsize used to pass the decorator and fail at the tool's first call.
    with pytest.raises(dejacache.ConfigurationError, match=re.escape(message)):
        dejacache.tool_cache(**kwargs)(lambda x: x)  # type: ignore[arg-type]
