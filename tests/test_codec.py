"""The codec: values come back as the types they went in as, and damaged bytes never decode."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import decimal
import enum
import math
import pathlib
import pickle
import subprocess
import sys
import uuid
from typing import Any

import orjson
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dejacache
from dejacache._tags import from_tree, to_tree
from dejacache.codec import (
    CODEC_VERSION,
    JsonCodec,
    PickleCodec,
    blob_from_tree,
    blob_payload,
)
from dejacache.errors import (
    ConfigurationError,
    DejacacheWarning,
    IntegrityError,
    SerializationError,
)


class Mood(enum.Enum):
    HAPPY = "happy"
    SAD = 2


@dataclasses.dataclass
class Inner:
    when: datetime.date
    tags: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Outer:
    name: str
    inner: Inner
    blob: bytes
    counter: int = dataclasses.field(default=0, init=False)


class Usage(pydantic.BaseModel):
    prompt_tokens: int
    completion_tokens: int


class Choice(pydantic.BaseModel):
    index: int
    text: str


class Completion(pydantic.BaseModel):
    id: str
    choices: list[Choice]
    usage: Usage | None = None
    created: datetime.datetime


def roundtrip(value: Any, codec: Any = None, key: str = "k") -> Any:
    codec = codec or JsonCodec()
    return codec.decode(codec.encode(value, key=key, namespace="ns"), key=key, namespace="ns")


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


# ------------------------------------------------------------------------------ hypothesis

_hashable = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=6)
    | st.binary(max_size=6)
    | st.floats(allow_nan=False)
    | st.datetimes()
    | st.dates()
    | st.uuids()
    | st.decimals(allow_nan=False)
    | st.sampled_from(Mood)
)
_leaves = (
    _hashable
    | st.floats()  # NaN and infinities included: orjson alone would turn them into null
    | st.timedeltas()
    | st.times()
    | st.datetimes(timezones=st.timezones())
    | st.builds(pathlib.PurePosixPath, st.text(alphabet="abc/", max_size=6))
    | st.frozensets(_hashable, max_size=3)
    | st.sets(st.integers() | st.text(max_size=3), max_size=3)
)
_dict_keys = (
    st.text(max_size=6)  # may start with NUL: escaped away from type tags
    | st.sampled_from(["\x00tuple", "\x00bytes", "\x00map"])
    | st.integers()
    | st.tuples(st.integers(), st.text(max_size=2))
)
_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(_dict_keys, inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_values)
def test_roundtrip_keeps_types(value: Any) -> None:
    assert same(roundtrip(value), value)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    st.builds(Inner, st.dates(), st.lists(st.text(max_size=3), max_size=3).map(tuple)),
    st.text(max_size=5),
    st.binary(max_size=5),
)
def test_roundtrip_nested_dataclasses(inner: Inner, name: str, blob: bytes) -> None:
    value = {"o": Outer(name, inner, blob), "list": [inner]}
    back = roundtrip(value)
    assert back == value
    assert type(back["o"].inner) is Inner
    assert type(back["o"].inner.tags) is tuple


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    st.text(max_size=5),
    st.lists(st.builds(Choice, index=st.integers(0, 5), text=st.text(max_size=5)), max_size=3),
    st.none()
    | st.builds(Usage, prompt_tokens=st.integers(0, 9), completion_tokens=st.integers(0, 9)),
    st.datetimes(timezones=st.just(datetime.UTC)),
)
def test_roundtrip_nested_pydantic_models(
    id_: str, choices: list[Choice], usage: Usage | None, created: datetime.datetime
) -> None:
    value = Completion(id=id_, choices=choices, usage=usage, created=created)
    back = roundtrip(value)
    assert back == value
    assert type(back) is Completion
    assert all(type(c) is Choice for c in back.choices)


def test_plain_json_is_stored_untagged() -> None:
    _, plain = to_tree({"a": [1, 2.5, "x", None, True]})
    assert plain
    assert JsonCodec().encode({"a": 1}, key="k")[3:4] == b"J"
    assert not to_tree({"a": (1,)})[1]
    assert not to_tree([math.nan])[1]


def test_dict_subclasses_come_back_as_dicts() -> None:
    import collections

    back = roundtrip(collections.OrderedDict([("b", 1), ("a", 2)]))
    assert type(back) is dict and back == {"b": 1, "a": 2}
    assert list(back) == ["b", "a"]  # insertion order kept


def test_codec_serves_the_tag_functions_from_their_module() -> None:
    # ``to_tree``/``from_tree`` are public in ``codec``; a plain-JSON hit never loads them.
    from dejacache import codec

    assert codec.to_tree is to_tree and codec.from_tree is from_tree


def test_from_tree_inverts_to_tree() -> None:
    value = {"t": (1, b"x"), 3: {4.5}}
    tree, _ = to_tree(value)
    assert from_tree(orjson.loads(orjson.dumps(tree))) == value


# ------------------------------------------------------------------------------ integrity


def _blob(value: Any = None, key: str = "key-1") -> bytes:
    return JsonCodec().encode(value if value is not None else {"answer": (42,)}, key=key)


@pytest.mark.parametrize("value", [{"answer": 42}, {"answer": (42,), "b": b"z"}])
def test_every_flipped_byte_is_refused(value: Any) -> None:
    blob = _blob(value)
    codec = JsonCodec()
    for i in range(len(blob)):
        damaged = bytearray(blob)
        damaged[i] ^= 0xFF
        with pytest.raises(IntegrityError):
            codec.decode(bytes(damaged), key="key-1")


def test_tagged_blob_relabelled_plain_is_refused() -> None:
    # Turning T into J would otherwise serve the raw tag dicts as if they were data.
    blob = bytearray(_blob({"t": (1, 2)}))
    assert blob[3:4] == b"T"
    blob[3:4] = b"J"
    with pytest.raises(IntegrityError):
        JsonCodec().decode(bytes(blob), key="key-1")


@pytest.mark.parametrize("cut", [0, 1, 3, 5, 11, 12, -1])
def test_truncated_blob_is_refused(cut: int) -> None:
    blob = _blob()
    with pytest.raises(IntegrityError):
        JsonCodec().decode(blob[:cut], key="key-1")


def test_blob_under_another_key_is_refused() -> None:
    with pytest.raises(IntegrityError, match="key-2"):
        JsonCodec().decode(_blob(key="key-1"), key="key-2")


def test_foreign_bytes_are_refused() -> None:
    for data in (b"", b"{}", orjson.dumps({"a": 1}), b"DJ\x63J" + b"\x00" * 20):
        with pytest.raises(IntegrityError):
            JsonCodec().decode(data, key="k")


def test_integrity_error_is_a_serialization_error() -> None:
    assert issubclass(IntegrityError, SerializationError)
    assert issubclass(SerializationError, dejacache.DejacacheError)


def test_blob_payload_and_blob_from_tree_rebuild_exact_bytes() -> None:
    for value in ({"a": 1}, {"t": (1, b"x")}):
        blob = _blob(value, key="kk")
        tree, plain = blob_payload(blob)
        assert blob_from_tree(tree, plain, key="kk") == blob
    with pytest.raises(IntegrityError):
        blob_payload(PickleCodec(secret="s").encode(1, key="k"))


# ------------------------------------------------------------------------------ class allow-list


def _tagged_blob(tree: Any, key: str = "k") -> bytes:
    return blob_from_tree(tree, False, key=key)


def test_class_from_module_not_imported_is_refused_unless_allowed(tmp_path: pathlib.Path) -> None:
    # Build a blob in a child process, for a module this process has never imported.
    mod = tmp_path / "dj_not_imported_mod.py"
    mod.write_text(
        "import dataclasses\n@dataclasses.dataclass\nclass Thing:\n    x: int\n"
    )
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import dj_not_imported_mod as m; from dejacache.codec import JsonCodec;"
        "sys.stdout.write(JsonCodec().encode(m.Thing(7), key='k').hex())"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], check=True, capture_output=True,
        text=True, timeout=60,
    )
    blob = bytes.fromhex(out.stdout)
    assert "dj_not_imported_mod" not in sys.modules
    with pytest.raises(SerializationError, match="not imported"):
        JsonCodec().decode(blob, key="k")
    assert "dj_not_imported_mod" not in sys.modules  # refusing never imports it
    sys.path.insert(0, str(tmp_path))
    try:
        thing = JsonCodec(allow=["dj_not_imported_mod"]).decode(blob, key="k")
        assert type(thing).__name__ == "Thing" and thing.x == 7
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("dj_not_imported_mod", None)


@pytest.mark.parametrize(
    ("tag", "name"),
    [
        ("\x00model", "os:system"),
        ("\x00dataclass", "os:system"),
        ("\x00model", "subprocess:Popen"),
        ("\x00dataclass", "builtins:dict"),
        ("\x00enum", "pathlib:Path"),
        ("\x00model", "test_codec:Inner"),  # a dataclass is not a model
        ("\x00dataclass", "test_codec:Completion"),  # a model is not a dataclass
        ("\x00model", "test_codec:roundtrip"),
    ],
)
def test_tag_naming_a_function_or_wrong_class_is_refused(tag: str, name: str) -> None:
    import subprocess as _sp  # noqa: F401  (so the module counts as imported)

    blob = _tagged_blob({tag: [name, {"args": ["id"]}]})
    with pytest.raises(SerializationError, match=r"refusing|cannot rebuild"):
        JsonCodec().decode(blob, key="k")


def test_unknown_tag_is_refused() -> None:
    with pytest.raises(SerializationError, match="unknown type tag"):
        JsonCodec().decode(_tagged_blob({"\x00evil": 1}), key="k")


def test_bad_model_data_is_a_serialization_error() -> None:
    blob = _tagged_blob({"\x00model": ["test_codec:Usage", {"prompt_tokens": "many"}]})
    with pytest.raises(SerializationError, match="cannot rebuild"):
        JsonCodec().decode(blob, key="k")


# ------------------------------------------------------------------------------ store time errors


class Opaque:
    pass


@pytest.mark.parametrize("value", [Opaque(), {"a": [Opaque()]}, lambda: 1, range(3)])
def test_unencodable_value_raises_at_encode(value: Any) -> None:
    with pytest.raises(SerializationError, match="cannot encode") as info:
        JsonCodec().encode(value, key="key-9")
    assert info.value.key == "key-9"


def test_unencodable_result_reaches_the_caller_and_is_never_written() -> None:
    """The caller paid for the result: it gets it, with a warning, and nothing is stored."""
    store = dejacache.MemoryStore()
    dejacache.configure(store=store)
    opaque = Opaque()

    @dejacache.cache
    def f() -> Any:
        return {"ok": opaque}

    with pytest.warns(DejacacheWarning, match="PickleCodec"):
        assert f() == {"ok": opaque}
    assert list(store.iterate()) == []
    assert dejacache.stats().total.stores == 0


async def test_unencodable_async_result_reaches_the_caller_and_is_never_written() -> None:
    store = dejacache.MemoryStore()
    dejacache.configure(store=store)
    opaque = Opaque()

    @dejacache.cache
    async def f() -> Any:
        return opaque

    with pytest.warns(DejacacheWarning, match="not stored"):
        assert await f() is opaque
    assert list(store.iterate()) == []


# ------------------------------------------------------------------------------ pickle


def test_pickle_codec_needs_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEJACACHE_PICKLE_SECRET", raising=False)
    with pytest.raises(ConfigurationError, match="secret"):
        PickleCodec()
    with pytest.raises(ConfigurationError):
        PickleCodec(secret="")
    monkeypatch.setenv("DEJACACHE_PICKLE_SECRET", "from-env")
    assert roundtrip(Opaque.__name__, PickleCodec()) == "Opaque"


def test_pickle_roundtrip_of_values_json_cannot_hold() -> None:
    codec = PickleCodec(secret=b"s3cret")
    value = {"o": Opaque, "r": range(3), "c": 1 + 2j}
    assert roundtrip(value, codec) == value


def test_pickle_tampered_payload_refused_before_unpickling() -> None:
    codec = PickleCodec(secret="s")
    blob = codec.encode({"a": 1}, key="k", namespace="ns")
    for i in range(len(blob)):
        damaged = bytearray(blob)
        damaged[i] ^= 0x01
        with pytest.raises(IntegrityError):
            codec.decode(bytes(damaged), key="k", namespace="ns")


class _Boom:
    def __reduce__(self) -> Any:
        return (pytest.fail, ("unpickled an unsigned payload",))


def test_pickle_codec_refuses_unsigned_and_foreign_data() -> None:
    codec = PickleCodec(secret="s")
    evil = pickle.dumps(_Boom())
    for data in (evil, b"DJ" + bytes((CODEC_VERSION,)) + b"P" + b"\x00" * 32 + evil):
        with pytest.raises(IntegrityError):
            codec.decode(data, key="k", namespace="ns")
    with pytest.raises(IntegrityError, match="not a signed pickle"):
        codec.decode(JsonCodec().encode({"a": 1}, key="k"), key="k", namespace="ns")


def test_pickle_signature_bound_to_key_namespace_and_secret() -> None:
    codec = PickleCodec(secret="s")
    blob = codec.encode([1, 2], key="k", namespace="ns")
    assert codec.decode(blob, key="k", namespace="ns") == [1, 2]
    for key, ns in (("k2", "ns"), ("k", "other")):
        with pytest.raises(IntegrityError, match="signature"):
            codec.decode(blob, key=key, namespace=ns)
    with pytest.raises(IntegrityError, match="signature"):
        PickleCodec(secret="t").decode(blob, key="k", namespace="ns")


def test_json_codec_refuses_pickle_blobs() -> None:
    blob = PickleCodec(secret="s").encode({"a": 1}, key="k")
    with pytest.raises(IntegrityError, match="pickled"):
        JsonCodec().decode(blob, key="k")


def test_unpicklable_value_is_a_serialization_error() -> None:
    import threading

    with pytest.raises(SerializationError, match="cannot pickle"):
        PickleCodec(secret="s").encode(threading.Lock(), key="k")


def test_configure_pickle_codec_end_to_end() -> None:
    dejacache.configure(store=dejacache.MemoryStore(), codec=PickleCodec(secret="s"))
    calls: list[int] = []

    @dejacache.cache
    def f(n: int) -> Any:
        calls.append(n)
        return {"c": complex(n, 1)}

    assert f(2) == f(2) == {"c": 2 + 1j}
    assert calls == [2]


def test_configure_codec_allow(tmp_path: pathlib.Path) -> None:
    dejacache.configure(codec_allow=["some.module"])
    with pytest.raises(ConfigurationError):
        dejacache.configure(codec=JsonCodec(), codec_allow=["x"])
    with pytest.raises(ConfigurationError):
        dejacache.configure(codec="json")  # type: ignore[arg-type]


def test_decimal_and_path_subtypes() -> None:
    assert same(roundtrip(decimal.Decimal("1.500")), decimal.Decimal("1.500"))
    assert str(roundtrip(decimal.Decimal("1.500"))) == "1.500"
    assert type(roundtrip(pathlib.Path("/x"))) is type(pathlib.Path("/x"))
    assert type(roundtrip(pathlib.PureWindowsPath("c:/x"))) is pathlib.PureWindowsPath
    assert roundtrip(uuid.UUID(int=3)) == uuid.UUID(int=3)
    assert roundtrip(Mood.SAD) is Mood.SAD


_TAGS = ["tuple", "bytes", "bytearray", "set", "frozenset", "map", "int", "float", "datetime",
         "zdatetime", "date", "time", "timedelta", "uuid", "decimal", "path", "enum",
         "dataclass", "model", "nope"]
_junk = st.recursive(
    st.none() | st.integers(-(2**63), 2**63) | st.text(max_size=5) | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=2),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.sampled_from(_TAGS), _junk)
def test_malformed_tags_only_ever_raise_serialization_error(tag: str, arg: Any) -> None:
    blob = blob_from_tree({"\x00" + tag: arg}, False, key="k")
    with contextlib.suppress(SerializationError):  # anything else fails the test
        JsonCodec().decode(blob, key="k")


def test_named_time_zones_survive() -> None:
    import zoneinfo

    tz = zoneinfo.ZoneInfo("America/New_York")
    value = datetime.datetime(2021, 11, 7, 1, 30, fold=1, tzinfo=tz)
    back = roundtrip(value)
    assert back.tzinfo is tz and back.fold == 1 and back.utcoffset() == value.utcoffset()
    later = back + datetime.timedelta(days=30)  # arithmetic still follows the zone's rules
    assert later.utcoffset() == (value + datetime.timedelta(days=30)).utcoffset()
    bad = blob_from_tree({"\x00zdatetime": ["2020-01-01T00:00:00", "No/Such_Zone", 0]}, False,
                         key="k")
    with pytest.raises(SerializationError, match="cannot rebuild"):
        JsonCodec().decode(bad, key="k")


# ------------------------------------------------------------------------ integers, NaN


def test_huge_integers_round_trip() -> None:
    """Decimal text of 2**100000 raises ValueError (CPython's digit limit): hex is used."""
    codec = JsonCodec()
    for v in (2**100000, -(2**100000) - 7, 2**2000 + 1, 2**70):
        assert codec.decode(codec.encode(v, key="k"), key="k") == v


@pytest.mark.parametrize("kind", ["cycle", "deep"])
def test_cyclic_or_deep_values_raise_a_serialization_error_naming_the_cause(kind: str) -> None:
    value: list[Any] = []
    if kind == "cycle":
        value.append({"a": value})
    else:
        node = value
        for _ in range(10_000):
            node.append([])
            node = node[0]
    with pytest.raises(SerializationError, match="a cycle" if kind == "cycle" else "levels"):
        JsonCodec().encode(value, key="k")


def test_negative_zero_and_non_finite_floats_round_trip_inside_containers() -> None:
    codec = JsonCodec()
    got = codec.decode(codec.encode([-0.0, math.nan, math.inf, -math.inf], key="k"), key="k")
    assert math.copysign(1.0, got[0]) == -1.0
    assert math.isnan(got[1]) and got[2] == math.inf and got[3] == -math.inf


def test_decode_checked_reads_what_decode_reads_and_defers_everything_else() -> None:
    """``decode_checked`` (for bytes verified when put, see ``MemoryStore``) skips only the
    checksum: tagged values, pickles and foreign bytes go through ``decode`` and its errors."""
    codec = JsonCodec()
    for value in ({"a": [1, None, "x"]}, (1, 2), {"when": datetime.date(2024, 1, 2)}, [math.inf]):
        blob = codec.encode(value, key="k")
        assert codec.decode_checked(blob, key="k") == codec.decode(blob, key="k") == value
    with pytest.raises(IntegrityError):
        codec.decode_checked(b"not a blob", key="k")
    pickled = PickleCodec(secret="s").encode({"a": 1}, key="k")
    with pytest.raises(IntegrityError):
        codec.decode_checked(pickled, key="k")
