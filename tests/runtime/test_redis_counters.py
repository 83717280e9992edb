"""The Redis counters' pure parts: every counter of one call or one write shares one hash
tag (so one single-slot MGET / one script on a Cluster), and what counts as landed."""

from __future__ import annotations

import types

from hypothesis import given
from hypothesis import strategies as st

from dejacache._core.scopes import encode_component, global_prefix, tenant_prefix
from dejacache.runtime._layout import read_counters, write_counters
from dejacache.runtime._redis_counters import RedisCounters, counter_tag

text = st.text(min_size=0, max_size=20)


@given(resource=text, tenant=text, entity=st.none() | text)
def test_a_calls_and_a_writes_counters_share_the_resources_tag(
        resource: str, tenant: str, entity: str | None) -> None:
    res = encode_component(resource)
    levels = [tenant_prefix(tenant), global_prefix()]
    names = read_counters(levels, res, entity) + write_counters(levels, res, entity)
    names += write_counters([global_prefix()], res, None)
    assert {counter_tag(n) for n in names} == {res}
    assert all("{" not in n and "}" not in n for n in names)  # the tag is the store's


def test_names_not_made_by_the_layout_are_their_own_group() -> None:
    assert counter_tag("x") == "x" and counter_tag("gen/only") == "gen/only"


def _counters() -> RedisCounters:
    store = types.SimpleNamespace(key=lambda space, tag, *p: f"p:{space}:{{{tag}}}",
                                  timeout=0.05)
    return RedisCounters(store)


def test_landed_only_when_a_replica_the_master_has_acknowledged() -> None:
    c = _counters()
    assert c.wait_ms == 20
    assert c._landed([[3, 4, 0]], 2) == [3, 4]  # no replica: as durable as it gets
    assert c.replicas == 0
    assert c._landed([[3, 4, 1]], 2) is None  # a replica, not waited for: send again
    assert c.replicas == 1
    assert c._landed([[3, 4, 1], 1], 2) == [3, 4]
    assert c._landed([[3, 4, 1], 0], 2) is None  # WAIT timed out
    assert c._landed([[3, 1]], 2) is None and c._landed([], 1) is None  # malformed


def test_keys_are_grouped_per_tag_in_call_order() -> None:
    c = _counters()
    groups = c._groups(["gen/a/x/R", "gen/b/x/R", "gen/a/y/W"])
    assert groups == [([0, 2], ["p:g:{a}", "p:g:{a}"]), ([1], ["p:g:{b}"])]
    assert c._groups(["gen/a/x/R", "gen/b/x/R", "gen/a/y/W"]) is groups  # remembered


def test_the_memo_of_groups_stays_small_over_many_entities() -> None:
    c = _counters()
    most = 0
    for i in range(3000):
        c._groups([f"gen/cart/u{i}/R", "gen/cart/R"])
        most = max(most, len(c._memo))
    assert most <= 1024
