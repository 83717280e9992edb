"""A cached method keys the instance (or class) it is called on (``_receiver``)."""

from __future__ import annotations

import collections
import dataclasses
import enum
import io
import re
import socket
import sys
import threading
import types
from collections.abc import AsyncIterator
from typing import Any, ClassVar
from unittest.mock import ANY

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
    assert Base.create.explain(Child, "q").arguments["cls"][0].endswith(  # type: ignore[attr-defined]
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
    assert parts.arguments["self"][1] == {"model": "a", "_Slotted__secret_sauce": "aa",
                                          "<captured>": {"Slotted.<code>": ANY}}
    assert Name.ask.explain(Name("x"), "q").arguments["self"][1] == {  # type: ignore[attr-defined]
        "*": "x", "<captured>": {"Name.<code>": ANY}}


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


# Plain objects an instance holds: keyed by their data when all of it is data.


class _Config:
    """A plain class (no dataclass, no model, no hook), as users write one."""

    def __init__(self, model: str, **more: Any) -> None:
        self.model = model
        self.__dict__.update(more)


class _Agent:
    def __init__(self, model: str, **more: Any) -> None:
        self.config = _Config(model, **more)

    @dejacache.cache
    def ask(self, q: str) -> str:
        return f"{self.config.model}: {q}"

    @dejacache.cache(volatile=["self.config.started_at"])
    def ask_masked(self, q: str) -> str:
        return f"{self.config.model}: {q}"

    @dejacache.cache(key_self=True)
    def ask_strict(self, q: str) -> str:
        return f"{self.config.model}: {q}"


class _Run2:
    """A class whose name a digits pattern matches."""

    def __init__(self, note: str, **more: Any) -> None:
        self.note = note
        self.config = _Config("m-1", **more)
        self.tools = [_Config("t-1")]
        self.members = frozenset({_Config("s-1")})

    @dejacache.cache(volatile=[re.compile(r"\d+"), "self.config.tags[0]"])
    def ask(self, q: str) -> str:
        return f"{self.note}: {q}"


class _Run3(_Run2):
    pass


def test_volatile_patterns_run_once_over_a_receiver(store: dejacache.MemoryStore) -> None:
    # Each string used to be masked twice, by the receiver's walk and by the arguments'
    # pass: "<volatile>" came out as "<volatile\\>", as a literal placeholder does.
    r = _Run2("id 7", tags=["x 1", "kept 2"])
    parts = _Run2.ask.explain(r, "q 9")  # type: ignore[attr-defined]
    ph = "<volatile>"
    assert parts.arguments == {"q": f"q {ph}", "self": [f"{__name__}:_Run2", {
        "note": f"id {ph}",
        "config": [f"{__name__}:_Config", {"model": f"m-{ph}", "tags": [ph, f"kept {ph}"]}],
        "tools": [":", [[f"{__name__}:_Config", {"model": f"t-{ph}"}]]],
        "members": [":", {"\x00set": [[f"{__name__}:_Config", {"model": f"s-{ph}"}]]}]}]}
    # a class's tag is not text a pattern masks: a _Run3 is not a _Run2
    assert _Run3.ask.explain(_Run3("id 7", tags=[]), "q").arguments["self"][0] == (  # type: ignore[attr-defined]
        f"{__name__}:_Run3")
    assert _Run2("id 1").ask("q") == _Run2("id 2").ask("q") == "id 1: q"  # masked: a hit
    assert _Run3("id 1").ask("q") == "id 1: q"
    assert len(list(store.iterate())) == 2


class _Gen2:
    """Classes whose names a digits pattern matches, called through a classmethod."""

    @classmethod
    @dejacache.cache(volatile=[re.compile(r"\d+")])
    def make(cls, q: str) -> str:
        return f"{cls.__name__}: {q}"


class _Gen3(_Gen2):
    pass


def test_volatile_patterns_never_mask_a_classmethods_class(
        store: dejacache.MemoryStore) -> None:
    # Its class's qualified name was text the patterns masked: _Gen3.make("q 1") was served
    # _Gen2's answer. The patterns run over the arguments and a run-time class's captured
    # values, never over the class's name.
    assert _Gen2.make("q 1") == "_Gen2: q 1"
    assert _Gen3.make("q 1") == "_Gen3: q 1"
    assert _Gen2.make("q 2") == "_Gen2: q 1"  # the argument's digits masked: a hit
    assert len(list(store.iterate())) == 2
    assert _Gen2.make.explain(_Gen3, "q").arguments["cls"] == [  # type: ignore[attr-defined]
        f"{__name__}._Gen3"]

    def made(n: int) -> type:
        class Local:
            @classmethod
            @dejacache.cache(volatile=[re.compile(r"\d+")])
            def make(cls, q: str) -> str:
                return f"{n}: {q}"

        return Local

    assert made(1).make("q") == "1: q"
    assert made(2).make("q") == "2: q"  # what its method captured still keys it apart

    def tagged(tag: str) -> type:
        class Tagged:
            def label(self) -> str:
                return tag

            @classmethod
            @dejacache.cache(volatile=[re.compile(r"\d+")])
            def make(cls, q: str) -> str:
                return f"{cls().label()}: {q}"

        return Tagged

    # a run-time class's captured values are arguments' text: masked, its name is not
    form = tagged("v1").make.explain(tagged("v1"), "q").arguments["cls"]  # type: ignore[attr-defined]
    assert form[0].endswith("<locals>.Tagged")
    assert "v<volatile>" in str(form[1]) and "v1" not in str(form[1])


def test_a_nested_plain_object_is_keyed_by_its_data(store: dejacache.MemoryStore) -> None:
    # Both used to get "a: hi": the nested object was left out, one answer for both.
    assert _Agent("a").ask("hi") == "a: hi"
    assert _Agent("b").ask("hi") == "b: hi"
    assert _Agent("a").ask("hi") == "a: hi"  # the same data: a hit
    assert len(list(store.iterate())) == 2
    parts = _Agent.ask.explain(_Agent("a"), "hi")  # type: ignore[attr-defined]
    assert parts.left_out == ()
    assert parts.arguments["self"] == [f"{__name__}:_Agent", {
        "config": [f"{__name__}:_Config", {"model": "a"}]}]


def test_nested_objects_are_followed_through_every_level(
    store: dejacache.MemoryStore,
) -> None:
    def agent(model: str) -> _Agent:
        a = _Agent("x")
        a.config.inner = _Config("y", deeper=_Config(model, tags=("t", 1)))
        return a

    assert agent("a").ask("q") == agent("a").ask("q")
    assert _Agent.ask.cache_key(agent("a"), "q") != _Agent.ask.cache_key(  # type: ignore[attr-defined]
        agent("b"), "q")
    assert _Agent.ask.explain(agent("a"), "q").left_out == ()  # type: ignore[attr-defined]


def test_an_object_holding_anything_that_is_not_data_is_left_out_whole(
    store: dejacache.MemoryStore,
) -> None:
    lock = threading.Lock()
    for what in (lock, print, threading.Thread(target=print), io.StringIO(), _Config,
                 socket, [lock]):
        a, b = _Agent("a", other=what), _Agent("b", other=what)
        assert _Agent.ask.explain(a, "q").left_out == ("self.config",)  # type: ignore[attr-defined]
        assert _Agent.ask.cache_key(a, "q") == _Agent.ask.cache_key(b, "q")  # type: ignore[attr-defined]
    # ... and so is a socket, a lock or a thread held directly: they are not plain objects
    with socket.socket() as sock:
        a = _Agent("a")
        a.config, a.thread = sock, threading.Thread(target=print)  # type: ignore[assignment]
        a.event = threading.Event()  # a class written in Python, holding a lock
        assert _Agent.ask.explain(a, "q").left_out == (  # type: ignore[attr-defined]
            "self.config", "self.event", "self.thread")


def _clients() -> tuple[Any, Any]:
    httpx = pytest.importorskip("httpx")
    openai = pytest.importorskip("openai")
    return (httpx.Client(),
            openai.OpenAI(api_key="sk-proj-abcdefghijklmnop0123456789",
                          base_url="http://127.0.0.1:1"))


def test_clients_stay_left_out_and_never_change_the_key(store: dejacache.MemoryStore) -> None:
    made: list[Any] = []
    try:
        def agent(model: str) -> _Agent:
            a = _Agent(model)
            http, llm = _clients()
            made.extend((http, llm))
            a.http, a.llm, a.model = http, llm, model  # type: ignore[attr-defined]
            a.config.llm = llm  # inside a plain object too: that one is left out
            return a

        first, second = agent("a"), agent("a")
        key = _Agent.ask.cache_key(first, "q")  # type: ignore[attr-defined]
        assert _Agent.ask.explain(first, "q").left_out == (  # type: ignore[attr-defined]
            "self.config", "self.http", "self.llm")
        assert key == _Agent.ask.cache_key(second, "q")  # type: ignore[attr-defined]
        first.http.headers["x-changed"] = "1"
        first.llm.max_retries = 7
        assert first.ask("q") == second.ask("q")
        assert len(list(store.iterate())) == 1
        assert key == _Agent.ask.cache_key(first, "q")  # type: ignore[attr-defined]
        assert key != _Agent.ask.cache_key(agent("b"), "q")  # type: ignore[attr-defined]
    finally:
        for c in made:
            c.close()


def test_clients_leave_the_key_of_another_run_alone(tmp_path: Any) -> None:
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(
        "import httpx, openai, dejacache\n"
        "class Config:\n"
        "    def __init__(self):\n"
        "        self.model = 'm'\n"
        "        self.llm = openai.OpenAI(api_key='sk-run', base_url='http://127.0.0.1:1')\n"
        "class Agent:\n"
        "    def __init__(self):\n"
        "        self.config, self.http = Config(), httpx.Client()\n"
        "        self.llm = self.config.llm\n"
        "    @dejacache.cache\n"
        "    def ask(self, q): return q\n"
        "print(Agent.ask.cache_key(Agent(), 'q'))\n")
    pytest.importorskip("openai")
    keys_ = {subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            check=True, cwd=tmp_path).stdout for _ in range(2)}
    assert len(keys_) == 1


class _Node:
    def __init__(self, name: str) -> None:
        self.name = name

    @dejacache.cache
    def ask(self, q: str) -> str:
        return f"{self.name}: {q}"

    @dejacache.cache(key_self=True)
    def ask_strict(self, q: str) -> str:
        return q


def test_a_cycle_is_left_out_and_named(store: dejacache.MemoryStore) -> None:
    parent = _Node("p")
    parent.child = _Node("c")  # type: ignore[attr-defined]
    parent.child.parent = parent  # type: ignore[attr-defined]  # back to the receiver
    parent.loop = _Config("m")  # type: ignore[attr-defined]
    parent.loop.me = parent.loop  # type: ignore[attr-defined]  # to itself
    parent.shared = parent.twice = _Config("s")  # type: ignore[attr-defined]  # not a cycle
    parts = _Node.ask.explain(parent, "q")  # type: ignore[attr-defined]
    assert parts.left_out == ("self.child", "self.loop")
    assert parts.arguments["self"][1]["shared"] == parts.arguments["self"][1]["twice"]
    assert parent.ask("q") == "p: q"
    with pytest.raises(dejacache.ConfigurationError, match=(
            r"attribute 'child' of .*_Node cannot be keyed: self\.child\.parent "
            r"\(.*_Node\) refers back to an object holding it \(a cycle\); .*"
            r"volatile=\['self\.child\.parent'\]")):
        parent.ask_strict("q")


def test_objects_deeper_than_the_limit_are_left_out(store: dejacache.MemoryStore) -> None:
    from dejacache._receiver import NESTED_DEPTH

    def chain(levels: int, leaf: str) -> _Node:
        root = _Node("root")
        node: Any = root
        for _ in range(levels):
            node.next = _Config("x")
            node = node.next
        node.leaf = leaf
        return root

    deepest = chain(NESTED_DEPTH, "a")
    assert _Node.ask.explain(deepest, "q").left_out == ()  # type: ignore[attr-defined]
    assert _Node.ask.cache_key(deepest, "q") != _Node.ask.cache_key(  # type: ignore[attr-defined]
        chain(NESTED_DEPTH, "b"), "q")
    too_deep = chain(NESTED_DEPTH + 1, "a")
    assert _Node.ask.explain(too_deep, "q").left_out == ("self.next",)  # type: ignore[attr-defined]
    with pytest.raises(dejacache.ConfigurationError,
                       match=rf"self(\.next){{{NESTED_DEPTH + 1}}} .* is more than "
                             rf"{NESTED_DEPTH} objects deep"):
        too_deep.ask_strict("q")


def test_a_volatile_path_reaches_into_a_nested_object(store: dejacache.MemoryStore) -> None:
    first, second = _Agent("a", started_at=1.0), _Agent("a", started_at=2.0)
    assert first.ask_masked("q") == second.ask_masked("q")
    assert _Agent.ask_masked.cache_key(first, "q") == _Agent.ask_masked.cache_key(  # type: ignore[attr-defined]
        second, "q")
    assert _Agent.ask.cache_key(first, "q") != _Agent.ask.cache_key(second, "q")  # type: ignore[attr-defined]
    assert _Agent.ask_masked.explain(first, "q").arguments["self"][1]["config"] == [  # type: ignore[attr-defined]
        f"{__name__}:_Config", {"model": "a"}]
    assert _Agent.ask_masked.cache_key(_Agent("b", started_at=1.0), "q") != (  # type: ignore[attr-defined]
        _Agent.ask_masked.cache_key(first, "q"))  # type: ignore[attr-defined]
    # a path may mask what would leave the whole object out
    locked = _Agent("a", started_at=threading.Lock())
    assert _Agent.ask_masked.explain(locked, "q").left_out == ()  # type: ignore[attr-defined]
    assert _Agent.ask_masked.cache_key(locked, "q") == _Agent.ask_masked.cache_key(  # type: ignore[attr-defined]
        first, "q")


def test_key_self_true_names_the_nested_attribute(store: dejacache.MemoryStore) -> None:
    assert _Agent("a", n=1).ask_strict("q") == "a: q"
    with pytest.raises(dejacache.ConfigurationError, match=(
            r"key_self=True on .*_Agent\.ask_strict: attribute 'config' of .*_Agent cannot "
            r"be keyed: self\.config\.lock \(_thread\.lock\) is not data; .*"
            r"mask it \(volatile=\['self\.config\.lock'\]\)")):
        _Agent("a", lock=threading.Lock()).ask_strict("q")
    with pytest.raises(dejacache.ConfigurationError,
                       match=r"self\.config\.inner\.tools\[0\] "
                             r"\(builtins\.builtin_function_or_method\) is not data"):
        _Agent("a", inner=_Config("b", tools=[print])).ask_strict("q")


def test_credentials_in_a_nested_object_are_masked(tmp_path: Any) -> None:
    secret, password = "sk-live-nested0123456789abcdef", "hunter2-nested"
    store = dejacache.SQLiteStore(tmp_path / "c.db")
    with dejacache.scope(store=store):
        a = _Agent("a", api_key=secret, auth=_Config("x", password=password))
        assert a.ask("q") == "a: q"
        assert a.ask("q") == "a: q"
        parts = _Agent.ask.explain(a, "q")  # type: ignore[attr-defined]
        b = _Agent("a", api_key=secret + "x", auth=_Config("x", password=password))
        assert _Agent.ask.cache_key(a, "q") != _Agent.ask.cache_key(b, "q")  # type: ignore[attr-defined]
        requests = [r.request for _k, r in store.iterate()]
    store.close()
    assert requests and parts.left_out == ()
    for text in (parts.canonical, *(r.decode() for r in requests)):
        assert secret not in text and password not in text
        assert "<secret:" in text
    for f in tmp_path.iterdir():
        raw = f.read_bytes()
        assert secret.encode() not in raw and password.encode() not in raw


def test_a_list_never_spells_a_nested_object(store: dejacache.MemoryStore) -> None:
    # The nested form is a list ([tag, data]): a two-item list an attribute holds, whose
    # first item could be a tag, is written apart from it.
    real = _Agent("a")
    forged = _Agent("a")
    forged.config = [f"{__name__}:_Config", {"model": "a"}]  # type: ignore[assignment]
    escaped = _Agent("a")
    escaped.config = ["", forged.config]  # type: ignore[assignment]
    keys_ = {_Agent.ask.cache_key(x, "q") for x in (real, forged, escaped)}  # type: ignore[attr-defined]
    assert len(keys_) == 3
    inner = _Agent("a")
    inner.config.sub = (f"{__name__}:_Config", {"model": "a"})
    nested = _Agent("a")
    nested.config.sub = _Config("a")
    assert _Agent.ask.cache_key(inner, "q") != _Agent.ask.cache_key(nested, "q")  # type: ignore[attr-defined]
    plain = _Agent("a")
    plain.config.pair = ["role", "user"]  # no tag-like first item: written as it was
    assert _Agent.ask.explain(plain, "q").arguments["self"][1]["config"][1]["pair"] == [  # type: ignore[attr-defined]
        "role", "user"]


def test_a_simple_namespace_is_a_plain_object(store: dejacache.MemoryStore) -> None:
    import types

    a, b = _Agent("a"), _Agent("a")
    a.config, b.config = types.SimpleNamespace(model="a"), types.SimpleNamespace(model="b")  # type: ignore[assignment]
    assert a.ask("q") == "a: q" and b.ask("q") == "b: q"


@settings(deadline=None, derandomize=True, max_examples=200,
          suppress_health_check=[HealthCheck.too_slow])
@given(_attrs, _attrs)
def test_a_nested_object_is_keyed_exactly_when_all_it_holds_is_data(
    a: dict[str, Any], b: dict[str, Any],
) -> None:
    # Left out whole when anything in it is not data (and key_self=True refuses it, naming
    # the path); else keyed by its data: equal keys exactly when that data is equal.
    def holder(attrs: dict[str, Any]) -> _Bag:
        return _Bag({"inner": _Bag(attrs), "n": 1})

    data_a, data_b = _kept(a).keys() == a.keys(), _kept(b).keys() == b.keys()
    left = _BAG.left_out((holder(a), "q"), {})
    assert left == (() if data_a else ("self.inner",))
    same = (not data_a and not data_b) or (data_a and data_b and canonical_json(
        {"v": a}) == canonical_json({"v": b}))
    ka, kb = _BAG.key("", (holder(a), "q"), {}), _BAG.key("", (holder(b), "q"), {})
    assert (ka == kb) == same
    if data_a:
        assert _STRICT.key("", (holder(a), "q"), {}) == ka
    else:
        # (one of them, named by its path: into the list when the thing is in one, as
        # ``self.inner.b[0]`` for ``[lock]``)
        names = "|".join(a.keys() - _kept(a).keys())
        with pytest.raises(dejacache.ConfigurationError,
                           match=rf"self\.inner\.({names})(\[\d+\]|\.f)? "):
            _STRICT.key("", (holder(a), "q"), {})


# Plain objects inside a list, tuple or dict an instance holds: keyed as nested ones are.


class _Tool:
    def __init__(self, name: str, **more: Any) -> None:
        self.name = name
        self.__dict__.update(more)


class _Toolbox:
    def __init__(self, *names: str) -> None:
        self.tools: Any = [_Tool(n) for n in names]

    @dejacache.cache
    def ask(self, q: str) -> str:
        return f"{[getattr(t, 'name', t) for t in self.tools]}: {q}"

    @dejacache.cache(key_self=True)
    def ask_strict(self, q: str) -> str:
        return q

    @dejacache.cache(volatile=["self.tools[1].started_at"])
    def ask_second_masked(self, q: str) -> str:
        return q

    @dejacache.cache(volatile=["self.tools[*].started_at", "self.tools.s.started_at"])
    def ask_all_masked(self, q: str) -> str:
        return q


def _key(box: _Toolbox, method: Any = _Toolbox.ask) -> str:
    return str(method.cache_key(box, "q"))


def test_plain_objects_in_a_list_are_keyed_by_their_data(
    store: dejacache.MemoryStore,
) -> None:
    # Both used to get "['search']: hi": the list was left out, one answer for both.
    assert _Toolbox("search").ask("hi") == "['search']: hi"
    assert _Toolbox("calc").ask("hi") == "['calc']: hi"
    assert _Toolbox("search").ask("hi") == "['search']: hi"  # the same data: a hit
    assert len(list(store.iterate())) == 2
    parts = _Toolbox.ask.explain(_Toolbox("a", "b"), "q")  # type: ignore[attr-defined]
    assert parts.left_out == ()
    assert parts.arguments["self"] == [f"{__name__}:_Toolbox", {"tools": [":", [
        [f"{__name__}:_Tool", {"name": "a"}], [f"{__name__}:_Tool", {"name": "b"}]]]}]


def test_dict_values_tuples_and_later_items_are_keyed(store: dejacache.MemoryStore) -> None:
    def box(tools: Any) -> _Toolbox:
        b = _Toolbox()
        b.tools = tools
        return b

    pairs = [({"s": _Tool("a")}, {"s": _Tool("b")}),
             ((_Tool("a"), _Tool("x")), (_Tool("b"), _Tool("x"))),
             ([1, {"t": [_Tool("a")]}], [1, {"t": [_Tool("b")]}]),  # not the first item
             ({"s": 1, "t": _Tool("a")}, {"s": 1, "t": _Tool("b")})]
    for a, b in pairs:
        assert _Toolbox.ask.explain(box(a), "q").left_out == ()  # type: ignore[attr-defined]
        assert _key(box(a)) != _key(box(b))
        assert _key(box(a)) == _Toolbox.ask.cache_key(box(a), "q")  # type: ignore[attr-defined]
        assert box(a).ask("q") == box(a).ask("q")
    # a set's objects are keyed too (test_plain_objects_in_a_set_are_keyed_by_their_data)
    assert _key(box({_Tool("a")})) != _key(box({_Tool("b")}))
    # a list without plain objects is written as it was
    assert _Toolbox.ask.explain(box([["m:C", {}]]), "q").arguments["self"][1] == {  # type: ignore[attr-defined]
        "tools": [["m:C", {}]]}


def test_a_container_holding_anything_that_is_not_data_is_left_out_whole(
    store: dejacache.MemoryStore,
) -> None:
    with socket.socket() as sock:
        for what in (threading.Lock(), sock, print, _Tool("x", lock=threading.Lock())):
            a, b = _Toolbox("a"), _Toolbox("b")
            a.tools.append(what)
            b.tools.append(what)
            assert _Toolbox.ask.explain(a, "q").left_out == ("self.tools",)  # type: ignore[attr-defined]
            assert _key(a) == _key(b)
        with pytest.raises(dejacache.ConfigurationError, match=(
                r"self\.tools\[1\]\.lock \(_thread\.lock\) is not data; .*"
                r"mask it \(volatile=\['self\.tools\[1\]\.lock'\]\)")):
            box = _Toolbox("a", "b")
            box.tools[1].lock = threading.Lock()
            box.ask_strict("q")
    assert _Toolbox("a", "b").ask_strict("q") == "q"


def test_a_client_in_a_list_is_left_out_whole(store: dejacache.MemoryStore) -> None:
    http, llm = _clients()
    try:
        a, b = _Toolbox("a"), _Toolbox("b")
        a.tools.append(llm)
        b.tools = {"s": _Tool("b"), "http": http}
        assert _Toolbox.ask.explain(a, "q").left_out == ("self.tools",)  # type: ignore[attr-defined]
        assert _Toolbox.ask.explain(b, "q").left_out == ("self.tools",)  # type: ignore[attr-defined]
        c = _Toolbox("c")
        c.tools.append(llm)
        assert _key(a) == _key(c)  # (the list is out whatever else it holds)
    finally:
        http.close()
        llm.close()


def test_a_cycle_through_a_list_is_left_out_and_named(store: dejacache.MemoryStore) -> None:
    box = _Toolbox("a")
    box.tools.append(box)  # back to the receiver
    assert _Toolbox.ask.explain(box, "q").left_out == ("self.tools",)  # type: ignore[attr-defined]
    assert box.ask("q")
    loop = _Toolbox("a")
    loop.tools[0].mine = loop.tools  # a list holding an object holding that list
    assert _Toolbox.ask.explain(loop, "q").left_out == ("self.tools",)  # type: ignore[attr-defined]
    with pytest.raises(dejacache.ConfigurationError,
                       match=r"self\.tools\[0\]\.mine \(builtins\.list\) refers back"):
        loop.ask_strict("q")
    shared = _Toolbox()
    one = _Tool("s")
    shared.tools = [one, one, [one]]  # the same object twice is no cycle
    assert _Toolbox.ask.explain(shared, "q").left_out == ()  # type: ignore[attr-defined]


def test_depth_counts_through_containers(store: dejacache.MemoryStore) -> None:
    from dejacache._receiver import NESTED_DEPTH

    def nest(levels: int, leaf: str) -> _Toolbox:
        box = _Toolbox()
        value: Any = _Tool(leaf)
        for _ in range(levels - 1):  # the list is a level
            value = [value]
        box.tools = value
        return box

    assert _Toolbox.ask.explain(nest(NESTED_DEPTH, "a"), "q").left_out == ()  # type: ignore[attr-defined]
    assert _key(nest(NESTED_DEPTH, "a")) != _key(nest(NESTED_DEPTH, "b"))
    assert _Toolbox.ask.explain(nest(NESTED_DEPTH + 1, "a"), "q").left_out == (  # type: ignore[attr-defined]
        "self.tools",)


def test_a_volatile_path_reaches_into_a_list_item(store: dejacache.MemoryStore) -> None:
    def box(first: Any, second: Any) -> _Toolbox:
        b = _Toolbox("a", "b")
        b.tools[0].started_at, b.tools[1].started_at = first, second
        return b

    masked = _Toolbox.ask_second_masked
    assert _key(box(1, 1), masked) == _key(box(1, 2), masked)
    assert _key(box(1, 1), masked) != _key(box(2, 1), masked)  # only the second is masked
    assert _key(box(1, 1)) != _key(box(1, 2))
    assert _key(box(1, 1), _Toolbox.ask_all_masked) == _key(box(2, 2), _Toolbox.ask_all_masked)
    # a path may mask what would leave the whole list out
    assert _Toolbox.ask_second_masked.explain(  # type: ignore[attr-defined]
        box(1, threading.Lock()), "q").left_out == ()
    keyed = _Toolbox()
    keyed.tools = {"s": _Tool("a", started_at=1)}
    other = _Toolbox()
    other.tools = {"s": _Tool("a", started_at=2)}
    assert _key(keyed, _Toolbox.ask_all_masked) == _key(other, _Toolbox.ask_all_masked)
    # a block's path matches there too (it warns at exit about a path that never matched)
    for path in ("self.tools[1].started_at", "self.tools[*].started_at"):
        with dejacache.scope(volatile=[path]):
            assert _key(box(1, 1)) == _key(box(1, 2))
            assert box(1, 1).ask("q")


def test_plain_objects_passed_as_arguments_are_still_not_data() -> None:
    @dejacache.cache
    def ask(tools: list[Any]) -> str:
        return "x"

    with pytest.raises(dejacache.UnhashableArgument):
        ask.cache_key([_Tool("a")])  # type: ignore[attr-defined]


_pairs = st.lists(st.tuples(st.sampled_from([f"{__name__}:_Tool", ":", "", "a:b", "x"]),
                            st.dictionaries(st.just("name"), st.sampled_from(["a", "b"]))),
                  max_size=3)


@settings(deadline=None, derandomize=True, max_examples=200,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=3), _pairs,
       st.booleans())
def test_a_list_of_objects_never_spells_a_list_of_lists(
    names: list[str], pairs: list[tuple[str, dict[str, str]]], wrapped: bool,
) -> None:
    objects, lists = _Toolbox(*names), _Toolbox()
    lists.tools = [list(p) for p in pairs]
    if wrapped:  # the container's own form, as data
        lists.tools = [":", lists.tools]
    assert _BOX.key("", (objects, "q"), {}) != _BOX.key("", (lists, "q"), {})
    forged = _Toolbox()
    forged.tools = [":", [[f"{__name__}:_Tool", {"name": n}] for n in names]]
    assert _BOX.key("", (objects, "q"), {}) != _BOX.key("", (forged, "q"), {})


_BOX = KeyBuilder(_Toolbox.ask, "ask")


class _Pair:
    def __init__(self, first: str) -> None:
        self.pair = [first, 1]

    @dejacache.cache(volatile=["self.pair[1]"])
    def ask(self, q: str) -> str:
        return q


def test_a_volatile_path_under_the_instance_is_applied_once() -> None:
    # Applied again to the instance's form, the path masked the escape ``["", pair]`` whole:
    # pairs starting "a:b" and "c:d" shared one key.
    assert _Pair.ask.explain(_Pair("a:b"), "q").arguments["self"][1] == {  # type: ignore[attr-defined]
        "pair": ["", ["a:b", "<volatile>"]]}
    assert _Pair.ask.cache_key(_Pair("a:b"), "q") != _Pair.ask.cache_key(  # type: ignore[attr-defined]
        _Pair("c:d"), "q")


# Plain objects inside a set or frozenset an instance holds: keyed as in a list, as a set.


def _boxed(tools: Any) -> _Toolbox:
    b = _Toolbox()
    b.tools = tools
    return b


def test_plain_objects_in_a_set_are_keyed_by_their_data(store: dejacache.MemoryStore) -> None:
    # Both used to get "['a']: hi": the set was left out, one answer for both.
    assert _boxed({_Tool("a")}).ask("hi") == "['a']: hi"
    assert _boxed({_Tool("b")}).ask("hi") == "['b']: hi"
    assert _boxed({_Tool("a")}).ask("hi") == "['a']: hi"  # the same data: a hit
    assert len(list(store.iterate())) == 2
    parts = _Toolbox.ask.explain(_boxed({_Tool("b"), _Tool("a")}), "q")  # type: ignore[attr-defined]
    assert parts.left_out == ()
    tool = f"{__name__}:_Tool"
    assert parts.arguments["self"][1] == {"tools": [":", {"\x00set": [
        [tool, {"name": "a"}], [tool, {"name": "b"}]]}]}
    # a frozenset is the same data; a list or tuple of the same objects is not
    assert _key(_boxed(frozenset({_Tool("a"), _Tool("b")}))) == _key(
        _boxed({_Tool("b"), _Tool("a")}))
    assert _key(_boxed([_Tool("a"), _Tool("b")])) != _key(_boxed({_Tool("a"), _Tool("b")}))
    assert _key(_boxed((_Tool("a"),))) != _key(_boxed({_Tool("a")}))
    # inside the containers already walked, mixed with data, and sets in sets
    for a, b in (([{_Tool("a")}], [{_Tool("b")}]), ({"s": {_Tool("a")}}, {"s": {_Tool("b")}}),
                 ({"x", _Tool("a"), 1}, {"x", _Tool("b"), 1}),
                 ({frozenset({_Tool("a")})}, {frozenset({_Tool("b")})}),
                 ({("x", _Tool("a"))}, {("x", _Tool("b"))})):
        assert _Toolbox.ask.explain(_boxed(a), "q").left_out == ()  # type: ignore[attr-defined]
        assert _key(_boxed(a)) != _key(_boxed(b))
        assert _key(_boxed(a)) == str(_Toolbox.ask.cache_key(_boxed(a), "q"))  # type: ignore[attr-defined]
    # a set of data is keyed as it was
    assert _Toolbox.ask.explain(_boxed({"b", "a"}), "q").arguments["self"][1] == {  # type: ignore[attr-defined]
        "tools": {"\x00set": ["a", "b"]}}


@settings(deadline=None, derandomize=True, max_examples=100,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=5, unique=True),
       st.lists(st.sampled_from(["x", "y", 1, 2.5]), max_size=3), st.randoms())
def test_a_set_of_objects_is_keyed_whatever_its_order(names: list[str], data: list[Any],
                                                      rnd: Any) -> None:
    items = [*map(_Tool, names), *data]
    keys_ = set()
    for _ in range(3):  # new objects, inserted in another order: another iteration order
        rnd.shuffle(items)
        fresh = [_Tool(i.name) if isinstance(i, _Tool) else i for i in items]
        keys_.add(_BOX.key("", (_boxed(set(fresh)), "q"), {}))
        keys_.add(_BOX.key("", (_boxed([1, {"t": frozenset(reversed(fresh))}]), "q"), {}))
    assert len(keys_) == 2


def test_a_set_of_objects_keys_alike_under_any_hash_seed(tmp_path: Any) -> None:
    import pathlib
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(
        "import dejacache\n"
        "class Tool:\n"
        "    def __init__(self, n): self.n = n\n"
        "class Agent:\n"
        "    def __init__(self):\n"
        "        self.tools = {Tool('a'), Tool('b'), 'x', 'y', 3, frozenset({Tool('c'), 'z'})}\n"
        "        self.named = [{Tool(str(i)) for i in range(20)}]\n"
        "    @dejacache.cache\n"
        "    def ask(self, q): return q\n"
        "print(Agent.ask.cache_key(Agent(), 'q'))\n")
    env = {"PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(pathlib.Path(dejacache.__file__).parents[1])}
    keys_ = {subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            check=True, cwd=tmp_path, timeout=60,
                            env={**env, "PYTHONHASHSEED": seed}).stdout
             for seed in ("1", "2", "3")}
    assert len(keys_) == 1


class _Set(_Toolbox):
    @dejacache.cache(volatile=["self.tools[*].started_at"])
    def ask_masked(self, q: str) -> str:
        return q

    @dejacache.cache(volatile=["self.tools[0].started_at"])
    def ask_first_masked(self, q: str) -> str:
        return q


def test_a_set_of_objects_keeps_the_limits(store: dejacache.MemoryStore) -> None:
    from dejacache._receiver import NESTED_DEPTH

    def key(tools: Any, method: Any = _Toolbox.ask) -> str:
        b = _Set()
        b.tools = tools
        return str(method.cache_key(b, "q"))

    # one member that is not data leaves the set out, named; key_self=True names the path
    locked = {_Tool("a"), _Tool("b", lock=threading.Lock())}
    assert _Toolbox.ask.explain(_boxed(locked), "q").left_out == ("self.tools",)  # type: ignore[attr-defined]
    with pytest.raises(dejacache.ConfigurationError, match=(
            r"self\.tools\[\*\]\.lock \(_thread\.lock\) is not data; .*"
            r"mask it \(volatile=\['self\.tools\[\*\]\.lock'\]\)")):
        _boxed(locked).ask_strict("q")
    # a path masks what would leave it out; [*] reaches every member, an index none
    assert _Set.ask_masked.explain(_boxed({_Tool("a", started_at=threading.Lock())}),  # type: ignore[attr-defined]
                                   "q").left_out == ()
    masked, first = _Set.ask_masked, _Set.ask_first_masked
    one, two = {_Tool("a", started_at=1)}, {_Tool("a", started_at=2)}
    assert key(one, masked) == key(two, masked)
    assert key(one, first) != key(two, first)
    assert key(one) != key(two)
    # a cycle back to the receiver is named
    box = _Toolbox()
    back = _Tool("a")
    back.owner = box  # type: ignore[attr-defined]
    box.tools = {back}
    assert _Toolbox.ask.explain(box, "q").left_out == ("self.tools",)  # type: ignore[attr-defined]
    with pytest.raises(dejacache.ConfigurationError, match=r"self\.tools\[\*\]\.owner .* cycle"):
        box.ask_strict("q")
    # a set counts as a level
    deep: Any = _Tool("a")
    for _ in range(NESTED_DEPTH - 3):  # the set, _Tool("x"), the lists, _Tool("a")
        deep = [deep]
    assert _Toolbox.ask.explain(_boxed({_Tool("x", deep=deep)}), "q").left_out == ()  # type: ignore[attr-defined]
    assert _Toolbox.ask.explain(_boxed({_Tool("x", deep=[deep])}), "q").left_out == (  # type: ignore[attr-defined]
        "self.tools",)


def test_credentials_of_objects_in_a_set_are_masked() -> None:
    box = _boxed({_Tool("a", api_key="sk-live-123456789"), _Tool("b")})
    canonical = _Toolbox.ask.explain(box, "q").canonical  # type: ignore[attr-defined]
    assert "sk-live-123456789" not in canonical
    other = _boxed({_Tool("a", api_key="sk-live-987654321"), _Tool("b")})
    assert _key(box) != _key(other)  # masked by a keyed digest: still told apart


# Classes a factory makes share one qualified name: what their methods captured tells them
# apart (``_captures``).


def _cfg_class(tag: Any) -> type:
    class Cfg:
        def __init__(self) -> None:
            self.x = 1

        def label(self) -> Any:
            return tag

    return Cfg


class _Holder:
    def __init__(self, c: Any) -> None:
        self.c = c

    @dejacache.cache
    def go(self) -> Any:
        return self.c.label()

    @dejacache.cache(key_self=True)
    def go_strict(self) -> Any:
        return self.c.label()


def test_classes_a_factory_makes_are_keyed_by_what_they_captured(
    store: dejacache.MemoryStore,
) -> None:
    # Both used to answer "one": one class tag, the same attributes.
    assert _Holder(_cfg_class("one")()).go() == "one"
    assert _Holder(_cfg_class("two")()).go() == "two"
    assert _Holder(_cfg_class("one")()).go() == "one"  # the same data: a hit
    assert len(list(store.iterate())) == 2
    parts = _Holder.go.explain(_Holder(_cfg_class("one")()))  # type: ignore[attr-defined]
    assert parts.left_out == ()
    assert parts.arguments["self"][1]["c"] == [
        f"{__name__}:_cfg_class.<locals>.Cfg",
        {"x": 1, "<captured>": {"tag": "one", "Cfg.<code>": ANY}}]
    # the receiver itself, its escaped attributes, its bases', and an immutable capture
    key = _Holder.go.cache_key  # type: ignore[attr-defined]

    def receiver(tag: Any) -> type:
        class Base:
            def name(self) -> Any:
                return tag

        class Agent(Base):
            @dejacache.cache
            def ask(self, q: str) -> str:
                return f"{self.name()}: {q}"

        return Agent

    agents = receiver("a"), receiver("b")
    assert [a().ask("q") for a in agents] == ["a: q", "b: q"]
    one, two = agents[0](), agents[0]()
    code = {"tag": "a", "Agent.<code>": ANY, "Base.<code>": ANY}
    one.__dict__["<captured>"] = {"tag": "x"}  # an attribute never spells the captures
    assert type(one).ask.explain(one, "q").arguments["self"][1] == {  # type: ignore[attr-defined]
        "<<captured>": {"tag": "x"}, "<captured>": code}
    assert type(two).ask.explain(two, "q").arguments["self"][1] == {"<captured>": code}  # type: ignore[attr-defined]
    assert key(_Holder(_cfg_class(("x", 1))())) != key(_Holder(_cfg_class(("x", 2))()))
    assert key(_Holder(_cfg_class(Color.RED)())) != key(_Holder(_cfg_class(1)()))


class Color(enum.Enum):
    RED = 1


def test_a_capture_that_is_not_data_leaves_its_object_out_and_named(
    store: dejacache.MemoryStore,
) -> None:
    calls: list[str] = []
    held = _Holder(_cfg_class(calls)())
    # a nested object: left out whole, as for an attribute that is not data
    assert _Holder.go.explain(held).left_out == ("self.c",)  # type: ignore[attr-defined]
    with pytest.raises(dejacache.ConfigurationError, match=(
            r"self\.c\.<captured>\.tag \(builtins\.list\) is held by its class \(captured by "
            r"a method or set in its body\) and is not immutable data; make it immutable")):
        held.go_strict()

    # the receiver: that capture left out and named, the rest of it keyed; what the method
    # itself captures is its own key's, by the closure rule (a list it appends to: out)
    def receiver(tag: str, log: list[str], seen: list[str]) -> type:
        class Agent:
            def __init__(self, model: str) -> None:
                self.model = model

            def _record(self, q: str) -> None:
                log.append(q)

            @dejacache.cache
            def ask(self, q: str) -> str:
                self._record(q)
                seen.append(q)
                return f"{tag}/{self.model}: {q}"

        return Agent

    a = receiver("a", calls, [])("m")
    parts = type(a).ask.explain(a, "q")  # type: ignore[attr-defined]
    assert parts.left_out == ("self.<captured>.log",)
    assert parts.arguments["self"][1] == {"model": "m", "<captured>": {"Agent.<code>": ANY}}
    assert parts.arguments["<captured>"] == {"tag": "a"}  # (the method's own)
    assert a.ask("q") == "a/m: q"
    assert receiver("b", calls, [])("m").ask("q") == "b/m: q"


# Keys of a receiver whose classes are written at a module's top level, computed on main
# before classes made in a function were keyed by their captures: they must never change.
class _PinTool:

    def __init__(self, name: str, **more: Any) -> None:
        self.name = name
        self.__dict__.update(more)


@dataclasses.dataclass
class _PinSpec:
    model: str
    tags: frozenset[str] = frozenset()


class _PinColor(enum.Enum):
    RED = 1


class _PinAgent:

    def __init__(self) -> None:
        self.model = "m"
        self.tools = [_PinTool("a", n=1), _PinTool("b", c=_PinColor.RED)]
        self.by = {"s": _PinTool("s")}
        self.names = {"x", "y", "z"}
        self.frozen = frozenset({1, 2})
        self.pair = ["a:b", 1]
        self.inner = _PinTool("i", deep=_PinTool("j", tags={"p", "q"}))
        self.lock = threading.Lock()
        self.spec = _PinSpec("x", frozenset({"u"}))
        self.sets = [{"k", "l"}, frozenset({3})]

    def ask(self, q: str) -> str:
        return q


for _pinned in (_PinTool, _PinSpec, _PinColor, _PinAgent):
    _pinned.__module__ = "pin"  # (the test module's name depends on how pytest is run)


@pytest.mark.usefixtures("pin")
def test_keys_of_classes_written_at_top_level_did_not_change() -> None:
    kb = KeyBuilder(_PinAgent.ask, "ask")
    masked = KeyBuilder(_PinAgent.ask, "ask", volatile=["self.tools[*].n"])
    assert kb.key("ns", (_PinAgent(), "q"), {}) == "55a35b2d3c69b81f2027adfe011939b4"
    assert masked.key("ns", (_PinAgent(), "q"), {}) == "079920e1d3ae71322bb5d2636f461908"


# A class made at run time (not importable by its module and qualified name: a factory's, or
# one ``type()`` built) is keyed by its class-body data and what its methods capture.


def _labelled(tag: Any) -> type:
    class Cfg:
        LABEL = tag

        def label(self) -> Any:
            return self.LABEL

    return Cfg


def _labeller(tag: Any) -> Any:
    def label(self: Any) -> Any:
        return tag

    return label


class _Asks:
    def __init__(self, c: Any) -> None:
        self.c = c

    @dejacache.cache
    def go(self) -> Any:
        return self.c.label()


def test_class_attributes_of_a_factory_made_class_are_keyed(
    store: dejacache.MemoryStore,
) -> None:
    # Both used to answer "one": one qualified name, no instance data, nothing captured.
    assert _Asks(_labelled("one")()).go() == "one"
    assert _Asks(_labelled("two")()).go() == "two"
    assert _Asks(_labelled("one")()).go() == "one"  # the same class data: a hit
    assert len(list(store.iterate())) == 2
    parts = _Asks.go.explain(_Asks(_labelled("one")()))  # type: ignore[attr-defined]
    assert parts.arguments["self"][1]["c"] == [
        f"{__name__}:_labelled.<locals>.Cfg",
        {"<captured>": {"Cfg.LABEL": "one", "Cfg.<code>": ANY}}]

    def agent(tag: str) -> type:
        class Agent:
            PREFIX = tag

            @dejacache.cache
            def ask(self, q: str) -> str:
                return f"{self.PREFIX}: {q}"

        return Agent

    assert [agent(t)().ask("q") for t in ("a", "b")] == ["a: q", "b: q"]
    # a class attribute that is not immutable data: left out and named, as a capture is
    listed = agent("a")
    listed.HISTORY = []  # type: ignore[attr-defined]
    a = listed()
    assert type(a).ask.explain(a, "q").left_out == ("self.<captured>.Agent.HISTORY",)  # type: ignore[attr-defined]


def test_classes_built_by_type_with_one_name_are_told_apart(
    store: dejacache.MemoryStore,
) -> None:
    by_attr = [type("Cfg", (), {"LABEL": t, "label": lambda self: self.LABEL})
               for t in ("one", "two")]
    assert [_Asks(k()).go() for k in by_attr] == ["one", "two"]
    by_capture = [type("Named", (), {"label": _labeller(t)}) for t in ("three", "four")]
    assert [_Asks(k()).go() for k in by_capture] == ["three", "four"]


def _label_one(self: Any) -> str:
    return "one"


def _label_two(self: Any) -> str:
    return "two"


def _one_of_two_statements(first: bool) -> type:
    if first:
        class Cfg:
            def label(self) -> str:
                return "first"
    else:
        class Cfg:  # type: ignore[no-redef]
            def label(self) -> str:
                return "second"
    return Cfg


def test_classes_of_one_name_whose_methods_differ_only_in_code_are_told_apart(
    store: dejacache.MemoryStore,
) -> None:
    # Each pair used to answer its first's answer twice: one name, no data, nothing captured.
    by_function = [type("Cfg", (), {"label": f}) for f in (_label_one, _label_two)]
    assert [_Asks(k()).go() for k in by_function] == ["one", "two"]
    by_lambda = [type("Cfg", (), {"label": lambda self: "three"}),
                 type("Cfg", (), {"label": lambda self: "four"})]
    assert [_Asks(k()).go() for k in by_lambda] == ["three", "four"]
    by_default = [type("Cfg", (), {"label": lambda self, t=t: t}) for t in ("five", "six")]
    assert [_Asks(k()).go() for k in by_default] == ["five", "six"]
    by_statement = [_one_of_two_statements(first) for first in (True, False)]
    assert [_Asks(k()).go() for k in by_statement] == ["first", "second"]
    unread: list[Any] = []  # functions whose source cannot be read: keyed by their bytecode
    for text in ("'seven'", "'eight'"):
        ns: dict[str, Any] = {}
        exec(f"def label(self):\n    return {text}\n", ns)
        unread.append(type("Cfg", (), {"label": ns["label"]}))
    assert [_Asks(k()).go() for k in unread] == ["seven", "eight"]
    stored = len(list(store.iterate()))
    # the same statement made again, the same functions: hits
    assert _Asks(_one_of_two_statements(True)()).go() == "first"
    assert _Asks(type("Cfg", (), {"label": _label_one})()).go() == "one"
    assert len(list(store.iterate())) == stored == 10


def test_a_classmethods_class_and_a_dataclass_argument_are_told_apart_by_their_code(
    store: dejacache.MemoryStore,
) -> None:
    def make(first: bool) -> type:
        if first:
            @dataclasses.dataclass(frozen=True)
            class Spec:
                model: str

                def label(self) -> str:
                    return f"first/{self.model}"

                @classmethod
                @dejacache.cache
                def create(cls, q: str) -> str:
                    return f"first: {q}"
        else:
            @dataclasses.dataclass(frozen=True)
            class Spec:  # type: ignore[no-redef]
                model: str

                def label(self) -> str:
                    return f"second/{self.model}"

                @classmethod
                @dejacache.cache
                def create(cls, q: str) -> str:
                    return f"second: {q}"
        return Spec

    specs = [make(True), make(False)]
    assert [_labelled_by(k("m")) for k in specs] == ["first/m", "second/m"]
    assert [k.create("q") for k in specs] == ["first: q", "second: q"]


def test_a_classmethods_class_made_at_run_time_is_keyed_by_its_data(
    store: dejacache.MemoryStore,
) -> None:
    def make(tag: str, suffix: str) -> type:
        class Made:
            LABEL = tag

            @classmethod
            @dejacache.cache
            def create(cls, q: str) -> str:
                return f"{cls.LABEL}{cls.end()}: {q}"

            @staticmethod
            def end() -> str:
                return suffix

        return Made

    made = [make("a", "!"), make("b", "!"), make("a", "?")]
    assert [k.create("q") for k in made] == ["a!: q", "b!: q", "a?: q"]
    assert make("a", "!").create("q") == "a!: q"
    assert len(list(store.iterate())) == 3
    assert made[0].create.explain(made[0], "q").arguments["cls"] == [  # type: ignore[attr-defined]
        f"{__name__}.{made[0].__qualname__}",
        {"<captured>": {"Made.LABEL": "a", "suffix": "!", "Made.<code>": ANY}}]


def _spec_class(tag: str) -> Any:
    @dataclasses.dataclass(frozen=True)
    class Spec:
        model: str

        def label(self) -> str:
            return f"{tag}/{self.model}"

    return Spec


def _model_class(tag: str) -> Any:
    class Prompt(pydantic.BaseModel):
        text: str
        SYSTEM: ClassVar[str] = tag

        def label(self) -> str:
            return f"{self.SYSTEM}/{self.text}"

    return Prompt


@dejacache.cache
def _labelled_by(spec: Any) -> str:
    return str(spec.label())


def test_factory_made_dataclasses_and_models_are_keyed_by_their_class_data(
    store: dejacache.MemoryStore,
) -> None:
    assert [_labelled_by(_spec_class(t)("m")) for t in ("a", "b")] == ["a/m", "b/m"]
    assert [_labelled_by(_model_class(t)(text="x")) for t in ("a", "b")] == ["a/x", "b/x"]
    assert _labelled_by(_spec_class("a")("m")) == "a/m"  # the same data: a hit
    assert len(list(store.iterate())) == 4
    # nested in a receiver
    assert [_Asks(_spec_class(t)("m")).go() for t in ("c", "d")] == ["c/m", "d/m"]
    assert [_Asks(_model_class(t)(text="y")).go() for t in ("c", "d")] == ["c/y", "d/y"]


# Keys of arguments and a classmethod's class written at a module's top level, computed on
# main before classes made at run time were keyed by their class data: they must never change.
class _PinMaker:
    LABEL = "x"

    @classmethod
    def make(cls, spec: Any) -> Any:
        return spec


class _PinModel(pydantic.BaseModel):
    text: str
    SYSTEM: ClassVar[str] = "s"


_PinMaker.__module__ = _PinModel.__module__ = "pin"


@pytest.fixture
def pin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pinned classes importable as ``pin.<name>``, as a module's own are."""
    module = types.ModuleType("pin")
    for k in (_PinTool, _PinSpec, _PinColor, _PinAgent, _PinMaker, _PinModel):
        setattr(module, k.__qualname__, k)
    monkeypatch.setitem(sys.modules, "pin", module)


@pytest.mark.usefixtures("pin")
def test_keys_of_arguments_and_classes_written_at_top_level_did_not_change() -> None:
    kb = KeyBuilder(vars(_PinMaker)["make"].__func__, "make")
    spec = _PinSpec("x", frozenset({"u"}))
    assert kb.key("ns", (_PinMaker, spec), {}) == "e1437ef5dd80cde764aa649709b68a5a"
    assert kb.key("ns", (_PinMaker, _PinModel(text="t")), {}) == "5c7c8904cf5dc009b7d7c144a3a47c82"


def test_a_class_attribute_that_is_not_data_is_named_by_key_self() -> None:
    listed = _labelled("a")
    listed.HISTORY = []  # type: ignore[attr-defined]

    class Strict(_Asks):
        @dejacache.cache(key_self=True)
        def go(self) -> Any:
            return self.c.label()

    with pytest.raises(dejacache.ConfigurationError, match=(
            r"self\.c\.<captured>\.Cfg\.HISTORY \(builtins\.list\) is held by its class")):
        Strict(listed()).go()
