"""@invalidates: entity and whole-resource invalidation, before and after the write, O(1)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

import dejacache
from dejacache.runtime import generations


class Db:
    """A tiny 'database' the tools read and write, counting reads."""

    def __init__(self) -> None:
        self.carts: dict[int, list[str]] = {1: [], 2: []}
        self.reads = 0


@pytest.fixture
def shop() -> Any:
    db = Db()

    @dejacache.tool_cache(resource="cart", key="cart:{user_id}")
    def get_cart(user_id: int) -> list[str]:
        db.reads += 1
        return list(db.carts[user_id])

    @dejacache.tool_cache(resource="cart")
    def all_carts() -> dict[str, list[str]]:
        db.reads += 1
        return {str(k): list(v) for k, v in db.carts.items()}

    @dejacache.invalidates("cart", key="cart:{user_id}")
    def add_item(user_id: int, sku: str) -> str:
        db.carts[user_id].append(sku)
        return "ok"

    @dejacache.invalidates("cart")
    def empty_all() -> None:
        for v in db.carts.values():
            v.clear()

    class Shop:
        pass

    s = Shop()
    s.db, s.get_cart, s.all_carts, s.add_item, s.empty_all = (  # type: ignore[attr-defined]
        db, get_cart, all_carts, add_item, empty_all)
    return s


def test_entity_write_invalidates_only_that_entity(shop: Any) -> None:
    with dejacache.agent_session(tenant="acme"):
        assert shop.get_cart(1) == [] and shop.get_cart(2) == []
        assert shop.db.reads == 2
        shop.add_item(1, "apple")
        assert shop.get_cart(1) == ["apple"]
        assert shop.get_cart(2) == []
    assert shop.db.reads == 3


def test_entity_write_invalidates_listings_of_the_resource(shop: Any) -> None:
    with dejacache.agent_session(tenant="acme"):
        assert shop.all_carts() == {"1": [], "2": []}
        shop.add_item(2, "pear")
        assert shop.all_carts() == {"1": [], "2": ["pear"]}


def test_whole_resource_write_invalidates_everything(shop: Any) -> None:
    with dejacache.agent_session(tenant="acme"):
        shop.add_item(1, "a")
        shop.add_item(2, "b")
        assert shop.get_cart(1) == ["a"] and shop.get_cart(2) == ["b"]
        assert shop.all_carts() == {"1": ["a"], "2": ["b"]}
        shop.empty_all()
        assert shop.get_cart(1) == [] and shop.get_cart(2) == []
        assert shop.all_carts() == {"1": [], "2": []}


def test_tenant_write_leaves_other_tenants_cached(shop: Any) -> None:
    with dejacache.agent_session(tenant="a"):
        shop.get_cart(1)
    with dejacache.agent_session(tenant="b"):
        shop.get_cart(1)
        shop.add_item(1, "x")
    reads = shop.db.reads
    with dejacache.agent_session(tenant="a"):
        shop.get_cart(1)  # still the tenant's own cached (isolated) value
    assert shop.db.reads == reads
    assert dejacache.runtime_stats(tenant="b").by_tool["add_item"].invalidations == 1
    assert dejacache.runtime_stats(tenant="a").total.invalidations == 0


def test_write_outside_a_session_reaches_every_tenant(shop: Any) -> None:
    for t in ("a", "b"):
        with dejacache.agent_session(tenant=t):
            shop.get_cart(1)
    shop.add_item(1, "admin")  # no session: a global invalidation
    for t in ("a", "b"):
        with dejacache.agent_session(tenant=t):
            assert shop.get_cart(1) == ["admin"]


def test_explicit_global_scope_from_inside_a_session(shop: Any) -> None:
    calls = []

    @dejacache.invalidates("cart", scope="global")
    def reindex() -> None:
        calls.append(1)

    with dejacache.agent_session(tenant="a"):
        shop.get_cart(1)
    with dejacache.agent_session(tenant="b"):
        reindex()
    reads = shop.db.reads
    with dejacache.agent_session(tenant="a"):
        shop.get_cart(1)
    assert shop.db.reads == reads + 1


def test_tenant_write_reaches_global_readers_of_the_resource() -> None:
    prices = {"x": 1}

    @dejacache.tool_cache(resource="price", scope="global")
    def price(sku: str) -> int:
        return prices[sku]

    @dejacache.invalidates("price", key="price:{sku}")
    def set_price(sku: str, value: int) -> None:
        prices[sku] = value

    assert price("x") == 1
    with dejacache.agent_session(tenant="a"):
        set_price("x", 2)
    assert price("x") == 2


def test_a_write_whose_entity_template_does_not_bind_invalidates_the_whole_resource() -> None:
    """A writer taking ``**fields`` whose call lacks the template's name still writes: with
    no entity to name, its whole resource is invalidated (before: nothing was, and the
    reader served the cart from before the write)."""
    carts = {1: ["old"]}

    @dejacache.tool_cache(resource="cart", key="cart:{user_id}", scope="global")
    def get_cart(user_id: int) -> list[str]:
        return list(carts[user_id])

    @dejacache.invalidates("cart", key="cart:{user_id}", scope="global")
    def save(**fields: Any) -> None:
        carts[fields["uid"]] = fields["items"]

    assert get_cart(1) == ["old"]
    save(uid=1, items=["new"])
    assert get_cart(1) == ["new"]


# Values a dict user holds for one key (each == 1), read one way and written another.
EQUAL_IDS = [1, 1.0, True, Decimal("1"), Fraction(1), "1"]


@pytest.mark.parametrize("written", EQUAL_IDS, ids=repr)
@pytest.mark.parametrize("read", [1, 1.0, Decimal("1.00")], ids=repr)
def test_a_write_naming_the_entity_by_an_equal_value_invalidates_the_read(
        read: Any, written: Any) -> None:
    """``order_id=1`` read, ``order_id=1.0`` (or ``True``, ``Decimal("1")``) written: one
    order (they are one dict key), so the read after the write must see it. Before, the
    template formatted "1" and "1.0" as two entities and the read served the old status."""
    orders = {1: "new"}

    @dejacache.tool_cache(resource="order", key="order:{order_id}")
    def get_order(order_id: Any) -> str:
        return orders[order_id]

    @dejacache.invalidates("order", key="order:{order_id}")
    def ship(order_id: Any, *, region: str = "eu") -> None:
        orders[1] = "shipped"

    with dejacache.agent_session(tenant="acme"):
        assert get_order(read) == "new"
        assert get_order(read) == "new"  # cached
        ship(order_id=written) if isinstance(written, str) else ship(written)
        assert get_order(read) == "shipped"
        assert get_order(order_id=read) == "shipped"


@dataclasses.dataclass(frozen=True)
class Sku:
    id: Any


def test_a_multi_field_entity_compares_its_numbers_by_value() -> None:
    stock = {("eu", 7): 3}

    @dejacache.tool_cache(resource="stock", key="{region}/{sku.id}")
    def level(region: str, sku: Any) -> int:
        return stock[(region, sku.id)]

    @dejacache.invalidates("stock", key="{region}/{sku.id}")
    def take(region: str, sku: Any) -> None:
        stock[(region, 7)] -= 1

    with dejacache.agent_session(tenant="acme"):
        assert level("eu", Sku(7)) == 3
        take("eu", Sku(7.0))
        assert level("eu", Sku(7)) == 2


def test_two_entities_never_share_an_entry_the_argument_digest_cannot_tell_apart() -> None:
    """The entity is in the entry's key. Before, only its counters' values were, so two
    entities whose counters agreed (none written yet) shared one entry whenever the
    argument digest held nothing that told them apart: user 2 was served user 1's cart."""
    @dejacache.tool_cache(resource="cart", key="cart:{user_id}", ignore=["user_id"])
    def get_cart(user_id: int, verbose: bool = False) -> str:
        return f"cart of {user_id}"

    class Region:
        def __init__(self, name: str) -> None:
            self.name = name

        @dejacache.tool_cache(resource="stock", key="{self.name}/{sku}", key_self=False)
        def stock(self, sku: str) -> str:
            return f"{sku} in {self.name}"

    with dejacache.agent_session(tenant="acme"):
        assert get_cart(1) == "cart of 1" and get_cart(2) == "cart of 2"
        assert get_cart(1) == "cart of 1"  # still cached, per user
        assert Region("eu").stock("x") == "x in eu" and Region("us").stock("x") == "x in us"
    assert dejacache.runtime_stats().by_tool["get_cart"].hits == 1


def test_unequal_values_of_one_entity_never_share_an_entry_the_digest_cannot_tell_apart(
) -> None:
    """Unequal values can name one entity (``0.1`` and ``Decimal("0.1")``, a rounding spec,
    ``1`` and ``"1"``); where the template reads an argument the key leaves out, the values
    it read are in the entry key too. Before, each second call was served the first's
    answer."""
    runs: list[Any] = []

    @dejacache.tool_cache(resource="price", key="p:{x}", ignore=["x"])
    def price(x: Any, verbose: bool = False) -> str:
        runs.append(x)
        return f"price of {x!r}"

    @dejacache.tool_cache(resource="rounded", key="r:{x:.0f}/{unit}", ignore=["x", "unit"])
    def rounded(x: float, unit: str = "kg") -> str:
        return f"{x} {unit}"

    @dejacache.invalidates("price", key="p:{x}")
    def reprice(x: Any) -> None:
        return None

    with dejacache.agent_session(tenant="acme"):
        assert price(0.1) == "price of 0.1"
        assert price(Decimal("0.1")) == "price of Decimal('0.1')"
        assert price(1) == "price of 1" and price("1") == "price of '1'"
        assert price(1) == "price of 1" and price("1") == "price of '1'"  # cached, apart
        assert rounded(1.2) == "1.2 kg" and rounded(1.4) == "1.4 kg"
        assert rounded(1.2) == "1.2 kg"
        # one entity still: a write through one spelling invalidates the other's entry
        reprice(0.1)
        assert price(Decimal("0.1")) == "price of Decimal('0.1')"
    assert runs == [0.1, Decimal("0.1"), 1, "1", Decimal("0.1")]
    assert dejacache.runtime_stats().by_tool["rounded"].hits == 1


def test_a_template_field_that_is_no_parameter_is_refused_in_a_nested_spec_too() -> None:
    with pytest.raises(dejacache.ConfigurationError, match="'width'"):
        @dejacache.tool_cache(resource="price", key="p:{x:{width}}")
        def price(x: float) -> str:
            return str(x)


def test_invalidates_tenant_scope_needs_a_session() -> None:
    @dejacache.invalidates("cart", scope="tenant")
    def write() -> None:
        return None

    with pytest.raises(dejacache.ScopeError, match="scope='global'"):
        write()


def test_second_invalidation_runs_even_if_the_write_raises(shop: Any) -> None:
    @dejacache.invalidates("cart", key="cart:{user_id}")
    def half_write(user_id: int) -> None:
        shop.db.carts[user_id].append("half")
        raise RuntimeError("crashed after writing")

    with dejacache.agent_session(tenant="acme"):
        shop.get_cart(1)
        with pytest.raises(RuntimeError):
            half_write(1)
        assert shop.get_cart(1) == ["half"]


def test_reader_loading_during_the_write_cannot_leave_a_stale_value() -> None:
    """A read that starts after the first invalidation and loads the old value while the
    write is in progress must not be served after the write (the second invalidation and the
    stale check protect it)."""
    db = {"v": "old"}
    reader_loading = threading.Event()
    writer_done = threading.Event()

    @dejacache.tool_cache(resource="doc", key="doc:{doc_id}")
    def read(doc_id: int) -> str:
        value = db["v"]  # loads the old value ...
        reader_loading.set()
        assert writer_done.wait(5)  # ... and returns only after the write finished
        return value

    @dejacache.invalidates("doc", key="doc:{doc_id}")
    def write(doc_id: int) -> None:
        assert reader_loading.wait(5)
        db["v"] = "new"

    sess = dejacache.agent_session(tenant="acme")
    results: list[str] = []

    def reader() -> None:
        with sess:
            results.append(read(1))

    def writer() -> None:
        with sess:
            write(1)
        writer_done.set()

    t1 = threading.Thread(target=reader)
    t2 = threading.Thread(target=writer)
    t2.start()
    t1.start()
    t1.join(10)
    t2.join(10)
    assert results == ["old"]  # that caller asked before the write finished
    with sess:
        assert read(1) == "new"  # and nobody is served the old value afterwards
    st = dejacache.runtime_stats().by_tool["read"]
    assert st.stale_protected == 1


def test_reader_that_stores_between_the_two_invalidations_is_not_served() -> None:
    db = {"v": "old"}

    @dejacache.tool_cache(resource="doc2", key="doc:{doc_id}")
    def read(doc_id: int) -> str:
        return db["v"]

    @dejacache.invalidates("doc2", key="doc:{doc_id}")
    def write(doc_id: int) -> None:
        # Another reader runs to completion after the first invalidation, before the write
        # lands, and stores the old value.
        assert read(doc_id) == "old"
        db["v"] = "new"

    with dejacache.agent_session(tenant="acme"):
        write(1)
        assert read(1) == "new"


async def test_async_writer_and_reader() -> None:
    db = {"v": 1}

    @dejacache.tool_cache(resource="n")
    async def get() -> int:
        return db["v"]

    @dejacache.invalidates("n")
    async def incr() -> None:
        await asyncio.sleep(0)
        db["v"] += 1

    async with dejacache.agent_session(tenant="a"):
        assert await get() == 1
        await incr()
        assert await get() == 2
        assert await get() == 2


def test_invalidation_is_constant_time() -> None:
    """O(1): the number of counters touched does not depend on the entries cached."""
    store = dejacache.MemoryStore(maxsize=20_000)

    @dejacache.tool_cache(resource="big", key="item:{i}", store=store)
    def item(i: int) -> int:
        return i

    @dejacache.invalidates("big")
    def wipe() -> None:
        return None

    with dejacache.agent_session(tenant="acme"):
        for i in range(5000):
            item(i)
        before = dict(generations.local_generations()._values)
        wipe()
        after = generations.local_generations()._values
        changed = {k for k in after if after[k] != before.get(k)}
        # the tenant's counter, and the one every tenant's write bumps for global readers
        assert changed == {"gen/big/rt1/t/acme/R", "gen/big/rt1/a/R"}
        assert len(store) == 5000  # nothing scanned or deleted: old keys are unreachable
        item(1)
    assert dejacache.runtime_stats().by_tool["item"].misses == 5001


def test_bad_invalidates_arguments() -> None:
    with pytest.raises(dejacache.ConfigurationError):
        dejacache.invalidates("cart", scope="session")(lambda: None)
    with pytest.raises(dejacache.ConfigurationError, match="uid"):

        @dejacache.invalidates("cart", key="cart:{uid}")
        def write(user_id: int) -> None:
            return None


def test_local_counters_are_bounded_and_start_over_safely() -> None:
    gens = generations.LocalGenerations(max_counters=4)
    names = ["a", "b"]
    assert gens.read(names) == [0, 0] and gens.epoch == 0
    gens.bump(names)
    gens.bump(["c", "d"])
    before = (gens.epoch, gens.read(names))
    gens.bump(["e"])  # over the bound: counters start over in a new epoch
    after = (gens.epoch, gens.read(names))
    assert before == (0, [1, 1]) and after == (1, [0, 0])
    assert before != after  # so no key from before can be computed again


def test_a_key_never_pairs_an_epoch_with_counters_of_another() -> None:
    """Counters read while another thread starts them over: the key part names the epoch
    the values were read in. Before, a read between the reset and the new epoch paired the
    old epoch with zeros (the key of an entry cached before that epoch's writes), or the
    new epoch with old values (a key the new epoch reaches again later): 5,065 of 300,000
    reads at a counter bound of 3."""
    import sys

    @dejacache.tool_cache(resource="r", scope="global")
    def read() -> int:
        return 0

    tc = read.tool_cache  # type: ignore[attr-defined]
    gens = generations.LocalGenerations(max_counters=3)

    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            gens.bump(["x", f"other{i}"])  # "x" climbs; every other bump starts over

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    t = threading.Thread(target=writer)
    seen: dict[str, int] = {}
    mixed = 0
    try:
        t.start()
        end = time.monotonic() + 5.0  # or 2,000 epochs seen, whichever comes first
        while time.monotonic() < end and len(seen) < 2000 and not mixed:
            values, part = tc.local_counters(gens, ("x",), [None])
            epoch = part.split(".", 1)[0]
            mixed += values[0] < seen.get(epoch, 0)  # an epoch's counters never go down
            seen[epoch] = max(seen.get(epoch, 0), values[0])
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(interval)
    assert len(seen) > 1  # the reads did overlap resets
    assert mixed == 0


@pytest.mark.parametrize("tiered", [False, True], ids=["sqlite", "memory-over-sqlite"])
def test_counters_of_a_file_store_outlive_this_process_state(
    tiered: bool, tmp_path: Any
) -> None:
    """Counters that restart with the process, in one process: forgetting every in-process
    counter (what a new process starts with) must not make an entry from before a write
    reachable again."""
    sq = dejacache.SQLiteStore(tmp_path / "rt.db")
    store = dejacache.TieredStore(dejacache.MemoryStore(), sq) if tiered else sq
    truth = [0]

    @dejacache.tool_cache(resource="cart", key="cart:{u}", store=store)
    def get(u: int) -> int:
        return truth[0]

    @dejacache.invalidates("cart", key="cart:{u}", store=store)
    def write(u: int) -> None:
        truth[0] += 1

    with dejacache.agent_session(tenant="acme"):
        assert get(1) == 0
        write(1)
        generations.reset()
        assert get(1) == 1  # before: 0, the entry cached under counters that restarted at 0
        generations.reset()
        assert get(1) == 1
    assert dejacache.runtime_stats().by_tool["get"].hits == 1  # and still cached
    sq.close()


def test_a_write_reaches_a_configured_store_readers_go_back_to(tmp_path: Any) -> None:
    """Readers read through the store configured at the time of each call; a write bumped
    only the one configured at its own time. So a reader that went back to an earlier
    configured store served what a write made while another was configured had replaced
    (before: 0 after the write of 1)."""
    first = dejacache.SQLiteStore(tmp_path / "first.db")
    other = dejacache.SQLiteStore(tmp_path / "other.db")
    truth = [0]

    @dejacache.tool_cache(resource="price", scope="global")
    def price() -> int:
        return truth[0]

    @dejacache.invalidates("price")
    def raise_price() -> None:
        truth[0] += 1

    try:
        dejacache.configure(store=first)
        assert price() == 0 and price() == 0
        dejacache.configure(store=other)
        raise_price()
        dejacache.configure(store=first)
        assert price() == 1
        assert price() == 1 and dejacache.runtime_stats().by_tool["price"].hits == 2
    finally:
        dejacache.configure(store=None)
        first.close()
        other.close()


@pytest.fixture
def forget_cartz() -> Iterator[None]:
    """This process's record of resources written forgets 'cartz' afterwards: the pytest
    session running the test would name it in its own summary too."""
    from dejacache.runtime import _layout

    yield
    _layout.WRITTEN.pop("cartz", None)


@pytest.mark.usefixtures("forget_cartz")
def test_an_invalidated_resource_no_tool_reads_is_named_when_the_session_ends() -> None:
    """``invalidates("cartz")`` invalidated nothing and the cart was served stale: the
    session names the typo and the resource it most likely meant."""
    carts: dict[int, list[str]] = {1: []}

    @dejacache.tool_cache(resource="cart", key="cart:{user_id}")
    def get_cart(user_id: int) -> list[str]:
        return list(carts[user_id])

    @dejacache.invalidates("cartz", key="cart:{user_id}")
    def add_item(user_id: int, sku: str) -> str:
        carts[user_id].append(sku)
        return "ok"

    dejacache.configure(store=dejacache.MemoryStore())
    named = r"add_item invalidates 'cartz' \(did you mean the resource 'cart'\?\)"
    with pytest.warns(dejacache.DejacacheWarning, match=named), \
            dejacache.agent_session(tenant="t1"):
        get_cart(1)
        add_item(1, "book")
        assert get_cart(1) == []  # stale: what the warning is about


def test_a_process_that_only_writes_is_not_warned(monkeypatch: pytest.MonkeyPatch) -> None:
    from dejacache.runtime import _layout

    monkeypatch.setattr(_layout, "READ", set())  # its readers live in another process
    assert _layout.unread(["orders"]) == []
    monkeypatch.setattr(_layout, "READ", {"cart"})
    assert _layout.unread(["orders", "cart"]) == ["orders"]
