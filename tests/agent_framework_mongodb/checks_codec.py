"""Save-side serialization: what is refused, and what is proven before storing.

Seed sentences proven here (quoted in each test): public serialization,
restricted round-trip equivalence, custom-reducer and copyreg-extension
rejection, mapping/enum precedence, stateful-mapping rejection, cycles and
non-finite floats, and "each refused before a sequence is allocated or
MongoDB is touched" (a recording proxy over the real collection must see no
call at all).
"""

from __future__ import annotations

import collections
import contextlib
import copyreg
import datetime
import decimal
import enum
import hashlib
import math
import os
import types
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBMappingError,
    MongoDBSerializationError,
    MongoDBTypeNotPermittedError,
    canonical,
)
from agent_framework_mongodb.canonical import canonical_bytes, canonical_hash
from agent_framework_mongodb.codec import CheckpointCodec, dumps, loads
from agent_framework_mongodb.documents import encode_checkpoint
from tests.agent_framework_mongodb.conftest import make_checkpoint, scope_options
from tests.agent_framework_mongodb.faults import (
    CollectionProxy,
    io_besides_the_refusal,
    refusal_recorded,
)

MODULE = __name__


@dataclass
class Slotted:
    __slots__ = ("value",)
    value: Any


@dataclass
class Holder:
    value: Any
    tags: set[str] = field(default_factory=set)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1


class Bag:
    """A plain class whose state is its instance dictionary."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)


class OtherTZ(datetime.tzinfo):
    def utcoffset(self, dt: datetime.datetime | None) -> datetime.timedelta:
        return datetime.timedelta(0)

    def tzname(self, dt: datetime.datetime | None) -> str:
        return "other"

    def dst(self, dt: datetime.datetime | None) -> None:
        return None


class CustomReducer:
    def __reduce__(self) -> Any:
        return (os.getcwd, ())


class DictEnum(dict[str, int], enum.Enum):  # type: ignore[misc]  # a mapping and an enum at once
    ONLY = {"a": 1}  # noqa: RUF012


class MappingSubclass(collections.UserDict[str, Any]):
    pass


LISTED = tuple(
    f"{MODULE}:{cls.__qualname__}"
    for cls in (Slotted, Holder, Bag, Color, Level, CustomReducer, DictEnum, MappingSubclass)
)
CODEC = CheckpointCodec(LISTED)
POLICY = CODEC.policy


def rich_state() -> dict[Any, Any]:
    """Every supported value kind, nested."""
    return {
        "scalars": [None, True, False, 0, -(2**70), 1.5, -0.0, "text", "ünï", b"\x00b"],
        "bytearray": bytearray(b"ba"),
        "tuple": (1, (2, 3)),
        "set": {"a", "b", "c"},
        "frozenset": frozenset({1, 2}),
        "times": [
            datetime.date(2026, 1, 2),
            datetime.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=datetime.UTC),
            datetime.datetime(2026, 1, 2, 3, 4, 5),
            datetime.time(1, 2, 3),
            datetime.timedelta(days=1, microseconds=5),
            datetime.timezone(datetime.timedelta(hours=2), "X"),
        ],
        "decimal": decimal.Decimal("1.10"),
        "uuid": uuid.UUID(int=42),
        "enum": [Color.RED, Level.LOW],
        "objects": [Holder(Slotted(Color.BLUE), {"x"}), Slotted([1, {"k": "v"}])],
        "classes": [str, Holder],
        1: {2: "non-string keys"},
        "primitive keys": {
            uuid.UUID(int=7): "uuid",
            ("t", 1, (2.5, None)): "tuple",
            frozenset({b"b", datetime.date(2026, 1, 1)}): "frozenset",
            decimal.Decimal("1.5"): "decimal",
        },
    }


def storage_on(target: Any) -> MongoDBCheckpointStorage:
    return MongoDBCheckpointStorage(
        scope_options(allowed_checkpoint_types=LISTED), collection=target
    )


async def test_public_serialization_round_trips_losslessly(recording: CollectionProxy) -> None:
    """Seed: "The public dictionary is encoded as BSON binary with Python pickle so ...
    application executor state remain lossless" and calls only to_dict/from_dict."""
    storage = storage_on(recording)
    checkpoint = make_checkpoint(state=rich_state())
    await storage.save(checkpoint)
    loaded = await storage.load(checkpoint.checkpoint_id)
    assert loaded.to_dict() == checkpoint.to_dict()
    assert loaded.state["objects"][0].value.value is Color.BLUE
    assert type(loaded.state["bytearray"]) is bytearray
    assert loaded.state["classes"] == [str, Holder]


def test_restricted_round_trip_is_checked_on_the_exact_bytes() -> None:
    """Seed: "save creates the exact payload bytes, decodes them through the same restricted
    load path, recursively canonicalizes the decoded graph, and compares it"."""
    public = make_checkpoint(state=rich_state()).to_dict()
    encoded = CODEC.encode(public)
    assert encoded.payload == dumps(public, POLICY)
    assert canonical_hash(loads(encoded.payload, POLICY), POLICY) == encoded.payload_hash


def test_codec_round_trips_a_checkpoint_without_any_storage() -> None:
    """CheckpointCodec alone, with no collection and no I/O: encode proves the exact bytes,
    decode restores the public dictionary, and the identity survives the round trip."""
    checkpoint = make_checkpoint(state=rich_state())
    encoded = CODEC.encode(checkpoint.to_dict())
    restored = WorkflowCheckpoint.from_dict(CODEC.decode(encoded.payload))
    assert restored.to_dict() == checkpoint.to_dict()
    assert CODEC.encode(restored.to_dict()).payload_hash == encoded.payload_hash
    with pytest.raises(MongoDBSerializationError):
        CODEC.decode(dumps([1], POLICY))  # bytes of something other than a dictionary


def test_shared_references_survive_and_hash_like_copies() -> None:
    shared = [1, 2]
    value = {"a": shared, "b": shared}
    loaded = loads(dumps(value, POLICY), POLICY)
    assert loaded["a"] is loaded["b"]
    assert canonical_hash(value, POLICY) == canonical_hash({"a": [1, 2], "b": [1, 2]}, POLICY)


def doubling(depth: int, leaf: Any, *, shared: bool) -> Any:
    """Each level holds the level below twice: one object (shared) or two equal copies."""
    if depth == 0:
        return leaf() if callable(leaf) else leaf
    if shared:
        below = doubling(depth - 1, leaf, shared=True)
        return [below, below]
    return [doubling(depth - 1, leaf, shared=False), doubling(depth - 1, leaf, shared=False)]


def test_shared_sub_structures_are_walked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the walk remembers finished objects, an object reached 2**16 times through
    shared references is encoded from its state once (the bytes still spell it out)."""
    monkeypatch.setattr(canonical, "_FAST_VISITS", 0)  # straight to the walk that remembers
    states: list[Any] = []
    real_state = canonical.object_state

    def recorded_state(value: Any) -> Any:
        states.append(value)
        return real_state(value)

    monkeypatch.setattr(canonical, "object_state", recorded_state)
    encoded = canonical_bytes({"tree": doubling(16, Holder("leaf"), shared=True)}, POLICY)
    assert len(states) <= 2  # at most one before the memo-free walk's (zero) budget ran out
    assert encoded.count(b"leaf") == 2**16


@pytest.mark.parametrize("depth", [6, 12])  # the memo-free walk alone; both walks in turn
def test_shared_references_hash_like_copies(depth: int) -> None:
    value = {"tree": doubling(depth, Holder("leaf"), shared=True)}
    copies = {"tree": doubling(depth, lambda: Holder("leaf"), shared=False)}
    encoded = canonical_bytes(value, POLICY)
    assert encoded == canonical_bytes(copies, POLICY)
    assert CODEC.encode(value).payload_hash == hashlib.sha256(encoded).hexdigest()


async def test_shared_references_expanding_past_the_limit_are_refused_before_io(
    recording: CollectionProxy,
) -> None:
    """Identity spells every reference out, so 2**30 references to one leaf would be
    gigabytes: refused with MongoDBMappingError after a bounded amount of work."""
    checkpoint = make_checkpoint(state={"tree": doubling(30, {"leaf": [1, "x"]}, shared=True)})
    with pytest.raises(MongoDBMappingError, match="shared references") as caught:
        await storage_on(recording).save(checkpoint)
    assert type(caught.value) is MongoDBMappingError
    assert io_besides_the_refusal(recording) == [] and refusal_recorded(recording)


async def test_copyreg_dispatch_table_cannot_change_stored_bytes_or_hash(
    recording: CollectionProxy,
) -> None:
    """Seed: "The controlled pickler excludes attempted copyreg.dispatch_table registrations;
    unit coverage installs a divergent reducer and proves the stored pickle bytes and
    canonical hash remain unchanged" (ignored, so the save succeeds)."""
    checkpoint = make_checkpoint(checkpoint_id="dispatch", state={"holder": Holder("v", {"t"})})
    public = checkpoint.to_dict()
    before = (dumps(public, POLICY), canonical_hash(public, POLICY))
    copyreg.pickle(Holder, lambda _obj: (os.getcwd, ()))  # type: ignore[arg-type, return-value]
    try:
        assert (dumps(public, POLICY), canonical_hash(public, POLICY)) == before
        await storage_on(recording).save(checkpoint)
    finally:
        del copyreg.dispatch_table[Holder]
    stored = await recording.find_one({"checkpoint_id": "dispatch"})
    assert (bytes(stored["checkpoint"]), stored["payload_hash"]) == before


REGISTERED: dict[str, tuple[type, Any]] = {
    "object": (Slotted, Slotted(1)),
    "enum": (Color, Color.RED),
    "class-reference": (Holder, Holder),
    "timedelta": (datetime.timedelta, datetime.timedelta(days=1)),
    "timezone-of-a-datetime": (
        datetime.timezone,
        datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
    ),
    "timedelta-of-a-timezone": (datetime.timedelta, datetime.timezone(datetime.timedelta(hours=2))),
    "timedelta-of-a-time": (datetime.timedelta, datetime.time(1, tzinfo=datetime.UTC)),
}


@contextlib.contextmanager
def extension_registered(cls: type) -> Iterator[None]:
    copyreg.add_extension(cls.__module__, cls.__qualname__, 0x7A01)
    try:
        yield
    finally:
        copyreg.remove_extension(cls.__module__, cls.__qualname__, 0x7A01)


@pytest.mark.parametrize("kind", sorted(REGISTERED))
@pytest.mark.parametrize(
    "place",
    ["top", "dataclass-field", "slots", "instance-dict", "enum-value", "framework-message"],
)
async def test_copyreg_extension_registry_is_refused_before_io(
    recording: CollectionProxy, kind: str, place: str
) -> None:
    """Seed: "If any value's exact (module, qualname) ... is present in that registry, save
    raises MongoDBSerializationError with guidance to remove the registration or migrate the
    value ... before pickle, sequence allocation, or MongoDB I/O", walking "nested framework
    objects, dataclass fields, enum values, instance dictionaries, and slots" (and the
    timezone and timedelta that pickle writes inside datetime, time and timezone values)."""
    registered, value = REGISTERED[kind]
    checkpoint = make_checkpoint(state={"v": _nest(value, place)})
    with extension_registered(registered), pytest.raises(MongoDBSerializationError) as caught:
        await storage_on(recording).save(checkpoint)
    assert "remove the registration or migrate the value" in str(caught.value)
    assert io_besides_the_refusal(recording) == [] and refusal_recorded(recording)


def test_naive_values_do_not_need_their_timezone_class() -> None:
    """Only the classes pickle would actually write count: a naive datetime holds no timezone."""
    with extension_registered(datetime.timezone):
        CODEC.encode({"naive": datetime.datetime(2026, 1, 1), "t": datetime.time(1)})


def _nest(value: Any, place: str) -> Any:
    if place == "dataclass-field":
        return Holder(value)
    if place == "slots":
        return Slotted(value)
    if place == "instance-dict":
        return Bag(inner=value)
    if place == "enum-value":
        return {"enum": Color.RED, "value": [value]}
    if place == "framework-message":
        return make_checkpoint(state={"deep": value})  # a framework dataclass with slots
    return value


REFUSED: dict[str, tuple[Any, type[Exception]]] = {
    "custom __reduce__": (CustomReducer(), MongoDBSerializationError),
    "OrderedDict": (collections.OrderedDict(a=1), MongoDBSerializationError),
    "defaultdict": (collections.defaultdict(list), MongoDBSerializationError),
    "Counter": (collections.Counter("aa"), MongoDBSerializationError),
    "MappingProxyType": (types.MappingProxyType({}), MongoDBSerializationError),
    "listed mapping subclass": (MappingSubclass(a=1), MongoDBSerializationError),
    "listed mapping+enum": (DictEnum.ONLY, MongoDBSerializationError),
    "unlisted dataclass": (types.SimpleNamespace(a=1), MongoDBTypeNotPermittedError),
    "function": (len, MongoDBTypeNotPermittedError),
    "lambda": (lambda: 1, MongoDBTypeNotPermittedError),
    "NaN": (math.nan, MongoDBMappingError),
    "inf": (math.inf, MongoDBMappingError),
    "-inf": ([-math.inf], MongoDBMappingError),
    "custom tzinfo": (datetime.datetime(2026, 1, 1, tzinfo=OtherTZ()), MongoDBMappingError),
}


def cyclic_values() -> dict[str, Any]:
    looping_list: list[Any] = []
    looping_list.append(looping_list)
    looping_dict: dict[str, Any] = {}
    looping_dict["self"] = looping_dict
    looping_object = Holder(None)
    looping_object.value = [looping_object]
    return {"list": looping_list, "dict": looping_dict, "object": looping_object}


@pytest.mark.parametrize("name", sorted(REFUSED))
async def test_unsupported_values_are_refused_before_io(
    recording: CollectionProxy, name: str
) -> None:
    """Seed: "OrderedDict, mapping/enum multiple inheritance, and every mapping subclass are
    rejected before sequence allocation with MongoDBSerializationError, even when
    allowlisted" and "non-finite floats, and unsupported objects fail before sequence
    allocation with a stable MongoDBMappingError"."""
    value, expected = REFUSED[name]
    with pytest.raises(expected) as caught:
        await storage_on(recording).save(make_checkpoint(state={"nested": [{"v": value}]}))
    assert type(caught.value) is expected or expected is MongoDBSerializationError
    assert io_besides_the_refusal(recording) == [] and refusal_recorded(recording)


@pytest.mark.parametrize("name", ["list", "dict", "object"])
async def test_cycles_are_mapping_errors_before_io(recording: CollectionProxy, name: str) -> None:
    """Seed: "Cycles ... fail before sequence allocation with a stable MongoDBMappingError"
    (named as a cycle: the untracked first walk hands over to the tracking one)."""
    with pytest.raises(MongoDBMappingError, match="reference cycle") as caught:
        await storage_on(recording).save(make_checkpoint(state={"v": cyclic_values()[name]}))
    assert caught.value.category == "mapping"
    assert io_besides_the_refusal(recording) == [] and refusal_recorded(recording)


def test_mapping_guard_runs_before_enum_and_allowlist() -> None:
    """Seed: "The mapping guard runs before scalar, enum, dataclass, to_dict, and every other
    type handler": a listed enum that is also a dict is refused as a mapping."""
    with pytest.raises(MongoDBSerializationError, match="mapping"):
        CODEC.encode({"v": DictEnum.ONLY})


def test_save_refuses_non_checkpoint_and_foreign_versions() -> None:
    checkpoint = WorkflowCheckpoint(workflow_name="approval-workflow", graph_signature_hash="g")
    checkpoint.version = "2.0"

    with pytest.raises(MongoDBMappingError):
        encode_checkpoint(checkpoint, scope_options(), CODEC)
    with pytest.raises(MongoDBMappingError):
        encode_checkpoint({"not": "a checkpoint"}, scope_options(), CODEC)  # type: ignore[arg-type]


def test_shared_string_memo_leaves_canonical_bytes_unchanged() -> None:
    """Save's two walks share one memo of string encodings; it is a pure cache."""
    public = make_checkpoint(state=rich_state()).to_dict()
    shared: dict[str, bytes] = {}
    first = canonical_bytes(public, POLICY, shared)
    assert shared and canonical_bytes(public, POLICY, shared) == first
    assert canonical_bytes(loads(dumps(public, POLICY), POLICY), POLICY, shared) == first
    assert canonical_bytes(public, POLICY) == first


def test_deep_acyclic_state_encodes_and_too_deep_state_is_a_mapping_error() -> None:
    deep: Any = "leaf"
    for _ in range(100):
        deep = {"k": [deep]}
    assert canonical_bytes(deep, POLICY) == canonical_bytes(loads(dumps(deep, POLICY), POLICY),
                                                            POLICY)  # fmt: skip
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(MongoDBMappingError, match="nested too deeply"):
        canonical_bytes(deep, POLICY)
