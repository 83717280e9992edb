"""A cached method keys the instance (or class) it is called on (``_receiver``)."""

from __future__ import annotations

import collections
import dataclasses
import io
import socket
import threading
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dejacache
from dejacache.keys import KeyBuilder, canonical_json, explain


@pytest.fixture
def store() -> dejacache.MemoryStore:
    s = dejacache.MemoryStore()
    dejacache.configure(store=s)
    return s


class Client:
    """An LLM client as users write one: configuration, and things that are not data."""

    LIVE: ClassVar[list[tuple[str, str]]] = []

    def __init__(self, model: str, temperature: float = 0.0) -> None:
        self.model = model
        self.temperature = temperature
        self.history: list[dict[str, str]] = []
        self.http = socket.socket()  # a connection
        self.lock = threading.Lock()
        self.on_reply = print  # a callable
        self.log = io.StringIO()  # a file handle
        self.tools = [len]  # a container of things that are not data
        self.started_at = 0.0

    def close(self) -> None:
        self.http.close()

    def _answer(self, q: str) -> str:
        self.LIVE.append((self.model, q))
        return f"{self.model}/{self.temperature}: {q}"

    @dejacache.cache
    def ask(self, q: str) -> str:
        return self._answer(q)

    @dejacache.cache
    async def aask(self, q: str) -> str:
        return self._answer(q)

    @dejacache.cache
    async def stream(self, q: str) -> AsyncIterator[str]:
        yield self._answer(q)

    @dejacache.cache(volatile=["self.started_at"])
    def ask_masked(self, q: str) -> str:
        return self._answer(q)

    @dejacache.cache(key_self=False)
    def ask_shared(self, q: str) -> str:
        return self._answer(q)


@pytest.fixture
def clients() -> Any:
    made: list[Client] = []

    def make(*args: Any, **kwargs: Any) -> Client:
        made.append(Client(*args, **kwargs))
        return made[-1]

    Client.LIVE.clear()
    yield make
    for c in made:
        c.close()


def test_two_instances_with_different_configuration_are_two_questions(
    store: dejacache.MemoryStore, clients: Any,
) -> None:
    assert clients(model="a").ask("hi") == "a/0.0: hi"
    assert clients(model="b").ask("hi") == "b/0.0: hi"  # was "a/0.0: hi": a wrong answer
    assert clients(model="a", temperature=0.5).ask("hi") == "a/0.5: hi"
    assert clients(model="a").ask("hi") == "a/0.0: hi"  # the same data: a hit
    assert Client.LIVE == [("a", "hi"), ("b", "hi"), ("a", "hi")]


async def test_every_wrapper_keys_the_instance(store: dejacache.MemoryStore, clients: Any,
                                               ) -> None:
    for model in ("a", "b", "a"):
        assert await clients(model).aask("q") == f"{model}/0.0: q"
        assert [x async for x in clients(model).stream("q")] == [f"{model}/0.0: q"]
    assert Client.LIVE == [("a", "q"), ("a", "q"), ("b", "q"), ("b", "q")]


def test_attributes_that_are_not_data_are_left_out_and_said(
    store: dejacache.MemoryStore, clients: Any,
) -> None:
    c = clients("a")
    parts = Client.ask.explain(c, "hi")  # type: ignore[attr-defined]
    assert parts.left_out == ("self.http", "self.lock", "self.log", "self.on_reply",
                              "self.tools")
    tag, data = parts.arguments["self"]
    assert tag == f"{__name__}:Client"
    assert data == {"model": "a", "temperature": 0.0, "history": [], "started_at": 0.0}
    # the same through keys.explain, and nothing left out of a plain function's key
    assert explain("", "ask", (c, "hi"), fn=Client.ask).left_out == parts.left_out
    assert explain("", "f", ("hi",)).left_out == ()
    c.name = "bad \ud800 text"  # not valid Unicode: not data either
    assert Client.ask.explain(c, "hi").left_out == ("self.http", "self.lock", "self.log",  # type: ignore[attr-defined]
                                                    "self.name", "self.on_reply", "self.tools")
    assert c.ask("hi") == "a/0.0: hi"  # keyed without it, never refused


def test_the_instance_is_keyed_as_it_is_at_each_call(
    store: dejacache.MemoryStore, clients: Any,
) -> None:
    c = clients("a")
    c.ask("hi")
    c.history.append({"role": "user", "content": "hi"})
    c.ask("hi")  # another conversation: another question
    assert Client.ask.explain(c, "hi").arguments["self"][1]["history"] == [  # type: ignore[attr-defined]
        {"role": "user", "content": "hi"}]
    c.history.clear()
    c.ask("hi")
    assert Client.LIVE == [("a", "hi"), ("a", "hi")]


def test_the_instance_is_keyed_before_the_method_changes_it(
    store: dejacache.MemoryStore,
) -> None:
    class Chat:
        def __init__(self) -> None:
            self.history: list[str] = []

        @dejacache.cache
        def say(self, q: str) -> int:
            self.history.append(q)  # after keying: the entry is the empty history's
            return len(self.history)

    first = Chat()
    assert first.say("a") == 1
    assert Chat().say("a") == 1  # the same empty history: a hit
    assert first.say("a") == 2  # its history holds "a" now: another question


def test_a_volatile_path_masks_an_attribute(store: dejacache.MemoryStore, clients: Any,
                                            ) -> None:
    first, second = clients("a"), clients("a")
    first.started_at, second.started_at = 1.0, 2.0
    assert first.ask_masked("q") == second.ask_masked("q")
    assert first.ask("q") == second.ask("q")
    assert clients("b").ask_masked("q") == "b/0.0: q"
    assert Client.LIVE == [("a", "q"), ("a", "q"), ("a", "q"), ("b", "q")]
    assert "started_at" not in Client.ask_masked.explain(  # type: ignore[attr-defined]
        first, "q").arguments["self"][1]


def test_key_self_false_keeps_the_old_key(store: dejacache.MemoryStore, clients: Any) -> None:
    assert clients("a").ask_shared("q") == clients("b").ask_shared("q") == "a/0.0: q"
    assert "self" not in Client.ask_shared.explain(  # type: ignore[attr-defined]
        clients("a"), "q").arguments
    with pytest.raises(dejacache.ConfigurationError, match="True, False or None, not 1"):
        dejacache.cache(key_self=1)(Client._answer)  # type: ignore[call-overload]
    with pytest.raises(dejacache.ConfigurationError, match=(
            r"volatile path\(s\) self\.started_at on .*_answer can never match: "
            "key_self=False leaves the instance out")):
        dejacache.cache(key_self=False, volatile=["self.started_at"])(Client._answer)


def test_credentials_on_the_instance_are_masked_in_the_key(
    store: dejacache.MemoryStore,
) -> None:
    class Keyed:
        def __init__(self, api_key: str) -> None:
            self.api_key = api_key

        @dejacache.cache
        def ask(self, q: str) -> str:
            return q

    canonical = Keyed.ask.explain(Keyed("sk-live-123456789"), "q").canonical  # type: ignore[attr-defined]
    assert "sk-live-123456789" not in canonical
    assert Keyed.ask.cache_key(Keyed("sk-a")) != Keyed.ask.cache_key(Keyed("sk-b"))  # type: ignore[attr-defined]


def test_a_bound_method_keys_the_instance_it_is_bound_to(
    store: dejacache.MemoryStore, clients: Any,
) -> None:
    a, b = clients("a"), clients("b")
    ask_a, ask_b = dejacache.cache(a._answer), dejacache.cache(b._answer)
    assert (ask_a("q"), ask_b("q"), ask_a("q")) == ("a/0.0: q", "b/0.0: q", "a/0.0: q")
    assert Client.LIVE == [("a", "q"), ("b", "q")]
    assert ask_a.explain("q").left_out == explain(  # type: ignore[attr-defined]
        "", "x", (a, "q"), fn=Client._answer).left_out != ()


@pytest.mark.parametrize("key_self", [None, True])
def test_a_classmethod_keys_its_class_by_qualified_name(store: dejacache.MemoryStore,
                                                        key_self: bool | None) -> None:
    live: list[str] = []

    class Base:
        @classmethod
        @dejacache.cache(key_self=key_self)
        def create(cls, q: str) -> str:
            live.append(cls.__name__)
            return cls.__name__

    class Child(Base):
        pass

    assert [Base.create("q"), Child.create("q"), Child().create("q")] == [
        "Base", "Child", "Child"]
    assert live == ["Base", "Child"]
    assert Base.create.explain(Child, "q").arguments["cls"].endswith(  # type: ignore[attr-defined]
        "<locals>.Child")


def test_dataclass_and_model_receivers_are_keyed_by_their_fields(
    store: dejacache.MemoryStore,
) -> None:
    live: list[str] = []

    @dataclasses.dataclass
    class Agent:
        model: str
        client: Any = None  # not data when set: left out

        @dejacache.cache
        def ask(self, q: str) -> str:
            live.append(self.model)
            return self.model

    class Settings(pydantic.BaseModel):
        model: str

        @dejacache.cache
        def ask(self, q: str) -> str:
            live.append("s-" + self.model)
            return self.model

    lock = threading.Lock()
    for _ in range(2):
        Agent("a").ask("q"), Agent("a", lock).ask("q"), Agent("b").ask("q")
        Settings(model="a").ask("q"), Settings(model="b").ask("q")
    assert live == ["a", "a", "b", "s-a", "s-b"]  # (None and a lock: two values of client)
    assert Agent.ask.explain(Agent("a", lock), "q").left_out == (  # type: ignore[attr-defined]
        "self.client",)


def test_the_class_hook_decides(store: dejacache.MemoryStore, clients: Any) -> None:
    class Hooked(Client):
        __dejacache_key__ = ("model",)

    a, b = Hooked("a"), Hooked("a", temperature=1.0)
    try:
        assert a.ask("q") == b.ask("q") == "a/0.0: q"  # the temperature is not said: shared
        assert Hooked.ask.explain(a, "q").arguments["self"] == {  # type: ignore[attr-defined]
            "model": "a"}
    finally:
        a.close()
        b.close()


def test_slots_and_builtin_subclasses_are_keyed_never_refused(
    store: dejacache.MemoryStore,
) -> None:
    live: list[Any] = []

    class Slotted:
        __slots__ = ("__secret_sauce", "lock", "model", "unset")

        def __init__(self, model: str) -> None:
            self.model = model
            self.lock = threading.Lock()
            self.__secret_sauce = model * 2

        @dejacache.cache
        def ask(self, q: str) -> str:
            live.append(self.model)
            return self.model

    class Conversation(list[str]):
        def __init__(self, items: list[str], model: str) -> None:
            super().__init__(items)
            self.model = model

        @dejacache.cache
        def ask(self, q: str) -> str:
            live.append((self.model, *self))
            return q

    class Headers(collections.UserDict[str, str]):
        @dejacache.cache
        def ask(self, q: str) -> str:
            live.append(dict(self))
            return q

    class Name(str):
        @dejacache.cache
        def ask(self, q: str) -> str:
            live.append(str(self))
            return q

    for _ in range(2):
        Slotted("a").ask("q"), Slotted("b").ask("q")
        Conversation(["x"], "m").ask("q"), Conversation(["y"], "m").ask("q")
        Conversation(["x"], "n").ask("q")
        Headers(a="1").ask("q"), Headers(a="2").ask("q")
        Name("x").ask("q"), Name("y").ask("q")
    assert live == ["a", "b", ("m", "x"), ("m", "y"), ("n", "x"), {"a": "1"}, {"a": "2"},
                    "x", "y"]
    parts = Slotted.ask.explain(Slotted("a"), "q")  # type: ignore[attr-defined]
    assert parts.left_out == ("self.lock",)
    assert parts.arguments["self"][1] == {"model": "a", "_Slotted__secret_sauce": "aa"}
    assert Name.ask.explain(Name("x"), "q").arguments["self"][1] == {  # type: ignore[attr-defined]
        "*": "x"}


def test_key_builder_binds_the_receiver_in_every_spelling() -> None:
    kb = KeyBuilder(Client.ask, "ask")
    c = Client("a")
    try:
        forms = {kb.canonical((c, "q"), {}), kb.canonical((c,), {"q": "q"}),
                 kb.canonical((), {"self": c, "q": "q"})}
    finally:
        c.close()
    assert len(forms) == 1


# Attribute values: data, and things that are not (alone or inside data).
_LOCK = threading.Lock()
_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(alphabet="abc", min_size=1, max_size=3), inner, max_size=3),
    max_leaves=8)
_not_data = st.sampled_from([_LOCK, len, object(), [_LOCK], {"f": print}, Client])
_attrs = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _data | _not_data,
                         max_size=4)


class _Bag:
    def __init__(self, attrs: dict[str, Any]) -> None:
        self.__dict__.update(attrs)

    def ask(self, q: str) -> None: ...


_BAG = KeyBuilder(_Bag.ask, "ask")
_STRICT = KeyBuilder(_Bag.ask, "ask", key_self=True)


def _kept(attrs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in attrs.items():
        try:
            canonical_json({"v": v})
        except TypeError:
            continue
        out[k] = v
    return out


@settings(deadline=None, derandomize=True, max_examples=200,
          suppress_health_check=[HealthCheck.too_slow])
@given(_attrs, _attrs)
def test_an_instance_is_keyed_by_exactly_the_attributes_that_are_data(
    a: dict[str, Any], b: dict[str, Any],
) -> None:
    # Never refused; equal keys exactly when the data attributes are equal; what is left
    # out is what the canonicaliser refuses, and key_self=True refuses exactly then.
    ka, kb = _BAG.key("", (_Bag(a), "q"), {}), _BAG.key("", (_Bag(b), "q"), {})
    same = canonical_json({"v": _kept(a)}) == canonical_json({"v": _kept(b)})
    assert (ka == kb) == same
    left = _BAG.left_out((_Bag(a), "q"), {})
    assert left == tuple(sorted(f"self.{k}" for k in a.keys() - _kept(a).keys()))
    if left:
        with pytest.raises(dejacache.ConfigurationError, match=left[0].removeprefix("self.")):
            _STRICT.key("", (_Bag(a), "q"), {})
    else:
        assert _STRICT.key("", (_Bag(a), "q"), {}) == ka
