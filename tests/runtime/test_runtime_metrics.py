"""runtime_stats() per tool, resource and tenant; the optional Prometheus collector."""

from __future__ import annotations

import sys

import pytest

import dejacache
from dejacache.runtime.metrics import PrometheusCollector, ToolStats


def workload() -> None:
    @dejacache.tool_cache(resource="cart", key="cart:{u}")
    def get_cart(u: int) -> dict[str, int]:
        return {"u": u}

    @dejacache.tool_cache(resource="cart")
    def list_carts() -> list[int]:
        return [1]

    @dejacache.invalidates("cart", key="cart:{u}")
    def add(u: int) -> None:
        return None

    for tenant in ("a", "b"):
        with dejacache.agent_session(tenant=tenant):
            get_cart(1)
            get_cart(1)
            list_carts()
    with dejacache.agent_session(tenant="a"):
        add(1)
        get_cart(1)


def test_runtime_stats_by_tool_resource_and_tenant() -> None:
    workload()
    st = dejacache.runtime_stats()
    assert st.by_tool["get_cart"].hits == 2
    assert st.by_tool["get_cart"].misses == 3
    assert st.by_tool["list_carts"].misses == 2
    assert st.by_tool["add"].invalidations == 1
    assert st.by_resource["cart"].misses == 5
    assert st.by_resource["cart"].invalidations == 1
    assert st.total.bytes_stored > 0 and st.total.bytes_served > 0
    assert 0 < st.total.hit_rate < 1
    a = dejacache.runtime_stats(tenant="a")
    assert a.by_tool["get_cart"].misses == 2 and a.total.invalidations == 1
    b = dejacache.runtime_stats(tenant="b")
    assert b.by_tool["get_cart"].misses == 1 and b.total.invalidations == 0
    dejacache.reset_runtime_stats()
    assert dejacache.runtime_stats().total == dejacache.runtime_stats().total.__class__()


def test_prometheus_collector() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    workload()
    registry = prometheus_client.CollectorRegistry()
    registry.register(PrometheusCollector())
    text = prometheus_client.generate_latest(registry).decode()
    assert 'dejacache_runtime_hits_total{resource="cart",tool="get_cart"} 2.0' in text
    assert 'dejacache_runtime_invalidations_total{resource="cart",tool="add"} 1.0' in text
    assert "tenant=" not in text
    per_tenant = prometheus_client.CollectorRegistry()
    per_tenant.register(PrometheusCollector(per_tenant=True))
    text = prometheus_client.generate_latest(per_tenant).decode()
    assert 'dejacache_runtime_misses_total{resource="cart",tenant="b",tool="get_cart"} 1.0' in text


def test_prometheus_collector_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setitem(sys.modules, "prometheus_client.core", None)
    with pytest.raises(dejacache.ConfigurationError, match=r"dejacache\[prometheus\]"):
        PrometheusCollector()
    # Importing dejacache never needed it.
    assert dejacache.runtime_stats() is not None


def test_hit_rate_counts_every_call_that_reached_the_backend() -> None:
    # 100 calls: 42 served from the cache, 36 misses, 22 that bypassed it (counters
    # unreadable). The rate left the bypasses out: 42 / 78 = 0.54.
    st = ToolStats(hits=42, misses=36, bypassed=22)
    assert st.calls == 100 and st.hit_rate == 0.42
    assert ToolStats(hits=3, coalesced=1, off=4).hit_rate == 0.5
    assert ToolStats().hit_rate == 0.0


def test_hit_rate_of_a_run_with_redis_down() -> None:
    from dejacache.stores.redis import RedisStore
    from support_redis import free_port

    pytest.importorskip("redis")
    served = []

    @dejacache.tool_cache(resource="r", store=RedisStore(f"redis://127.0.0.1:{free_port()}"))
    def read(i: int) -> int:
        served.append(i)
        return i

    @dejacache.tool_cache(resource="m")
    def cached(i: int) -> int:
        return i

    with dejacache.agent_session(tenant="a"):
        for i in range(6):
            read(i)  # nothing listens: every call bypasses the cache
            cached(i % 2)  # 2 misses, 4 hits
    st = dejacache.runtime_stats()
    assert st.by_tool["read"].bypassed == 6 and st.by_tool["read"].hit_rate == 0.0
    assert st.total.calls == 12 and st.total.hit_rate == 4 / 12


def test_counters_of_many_tenants_stay_bounded() -> None:
    """A server with ever new tenants: past ``MAX_ROWS`` rows, new tenants' calls count
    under ``OTHER_TENANTS`` (before: one row per tenant and tool, for good); every total
    stays exact, and the tenants counted so far keep their own rows."""
    from dejacache.runtime import metrics

    @dejacache.tool_cache(resource="r")
    def look(x: int) -> int:
        return x

    n = 10_500
    for i in range(n):
        with dejacache.agent_session(tenant=f"t{i}"):
            look(1)
            look(1)
    assert len(metrics._COUNTS) <= 10_001  # MAX_ROWS, and the row of OTHER_TENANTS
    stats = dejacache.runtime_stats()
    assert (stats.total.misses, stats.total.hits) == (n, n)
    assert dejacache.runtime_stats(tenant="t0").total.hits == 1
    assert dejacache.runtime_stats(tenant=metrics.OTHER_TENANTS).total.misses >= 500
