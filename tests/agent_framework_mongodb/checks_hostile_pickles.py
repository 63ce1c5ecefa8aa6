"""A corpus of hostile pickles, each refused by the loader before anything runs.

Seed: "Loading uses a restricted unpickler: safe built-ins and concrete
agent_framework types are permitted, while application types must be
explicitly listed ... That allowlist permits class resolution only; it does
not permit custom __reduce__, __reduce_ex__, __getstate__, __setstate__, or
new-argument pickle hooks." and "Restricted-load ValueError failures,
including unregistered EXT codes, are translated to the same stable category."

Every payload would create the sentinel file if executed (a control test
proves that for the unrestricted loader); after each refusal the file must
not exist, which is what "before anything executes" means here.
"""

from __future__ import annotations

import contextlib
import copyreg
import os
import pickle
import random
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bson.binary import Binary

from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBMappingError,
    MongoDBSerializationError,
)
from agent_framework_mongodb.codec import dumps, loads
from agent_framework_mongodb.typepolicy import TypePolicy
from tests.agent_framework_mongodb import hostile_classes, hostile_types
from tests.agent_framework_mongodb.checks_hostile_classes import class_corpus
from tests.agent_framework_mongodb.conftest import StorageFactory, make_checkpoint
from tests.agent_framework_mongodb.hostile_types import SENTINEL_ENV
from tests.agent_framework_mongodb.pickle_ops import PROTO, call, glob, text, wrap

HOSTILE = "tests.agent_framework_mongodb.hostile_types"


def system(sentinel: str) -> bytes:
    return call(glob("os", "system"), text(f"touch {sentinel}"))


def corpus(sentinel: str) -> dict[str, bytes]:
    """Name -> payload; each would touch ``sentinel`` under plain pickle.loads."""
    touch_py = f"open({sentinel!r}, 'w').close()"
    protocol_0 = f"cos\nsystem\n(V touch {sentinel}\ntR.".encode()
    inner = b"B" + struct.pack("<I", len(protocol_0)) + protocol_0  # BINBYTES
    return {
        "os.system": wrap(system(sentinel)),
        "os.system-protocol-0": protocol_0,
        "posix.system": wrap(call(glob("posix", "system"), text(f"touch {sentinel}"))),
        "subprocess.Popen": wrap(
            call(glob("subprocess", "Popen"), b"(" + text("touch") + text(sentinel) + b"l")
        ),
        "builtins.eval": wrap(call(glob("builtins", "eval"), text(touch_py))),
        "builtins.exec": wrap(call(glob("builtins", "exec"), text(touch_py))),
        "builtins.open": wrap(call(glob("builtins", "open"), text(sentinel), text("w"))),
        "builtins.getattr-import": wrap(
            call(
                call(
                    glob("builtins", "getattr"),
                    call(glob("builtins", "__import__"), text("os")),
                    text("system"),
                ),
                text(f"touch {sentinel}"),
            )
        ),
        "__builtin__-alias": b"\x80\x02c__builtin__\neval\n(" + text(touch_py) + b"tR.",
        "nested-pickle.loads": wrap(call(glob("pickle", "loads"), inner)),
        "nested-_pickle.loads": wrap(call(glob("_pickle", "loads"), inner)),
        "framework-function": wrap(
            call(glob("agent_framework", "register_checkpoint_type"), glob("os", "system"))
        ),
        "framework-class-constructor": wrap(
            call(
                glob("agent_framework._workflows._checkpoint", "FileCheckpointStorage"),
                text(sentinel),
            )
        ),
        "listed-class-constructor-REDUCE": wrap(call(glob(HOSTILE, "Constructor"), text("x"))),
        "listed-__new__-NEWOBJ": wrap(glob(HOSTILE, "NewHook") + b")\x81"),
        "NEWOBJ-with-arguments": wrap(glob(HOSTILE, "Plain") + text("a") + b"\x85\x81"),
        "listed-__reduce__": wrap(glob(HOSTILE, "Reducer") + b")\x81}b"),
        "listed-__reduce_ex__": wrap(glob(HOSTILE, "ReducerEx") + b")\x81}b"),
        "listed-__setstate__-BUILD": wrap(glob(HOSTILE, "SetState") + b")\x81}b"),
        "listed-__getnewargs__": wrap(glob(HOSTILE, "NewArgs") + b")\x81"),
        "listed-enum-_missing_": wrap(call(glob(HOSTILE, "MissingEnum"), b"K\x63")),
        "listed-mapping-SETITEMS": wrap(
            glob(HOSTILE, "SetItemMapping") + b")\x81(" + text("k") + text("v") + b"u"
        ),
        "copyreg._reconstructor": wrap(
            call(glob("copyreg", "_reconstructor"), glob("os", "system"), text("x"), b"N")
        ),
        "EXT-registered-to-os.system": wrap(
            b"\x83\xf0\x00" + b"(" + text(f"touch {sentinel}") + b"tR"
        ),
        "INST-opcode": b"(" + text(f"touch {sentinel}") + b"ios\nsystem\n.",
        "OBJ-opcode": PROTO[:1]
        + b"\x02("
        + glob("os", "system")
        + text(f"touch {sentinel}")
        + b"o.",
        "BINPERSID": wrap(text(f"touch {sentinel}") + b"Q"),
        "BUILD-on-plain-dict": wrap(b"}" + b"}" + text("__class__") + b"Nsb"),
    }


@contextlib.contextmanager
def os_system_extension() -> Iterator[None]:
    """Register EXT code 0xF0 for os.system, so the EXT payload is really hostile."""
    copyreg.add_extension("os", "system", 0xF0)
    try:
        yield
    finally:
        copyreg.remove_extension("os", "system", 0xF0)


POLICY = TypePolicy(hostile_types.ALL)
NAMES = sorted(corpus("/x"))


def test_corpus_is_large_and_really_hostile(sentinel: Path) -> None:
    """Control: the unrestricted loader does run the corpus (so refusals below mean something)."""
    payloads = corpus(str(sentinel))
    assert len(payloads) >= 20
    for name in ("os.system", "builtins.open", "builtins.eval", "listed-__setstate__-BUILD"):
        sentinel.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            pickle.loads(payloads[name])  # unrestricted on purpose: the control
        assert sentinel.exists(), name


@pytest.mark.parametrize("name", NAMES)
def test_restricted_loader_refuses_before_executing(sentinel: Path, name: str) -> None:
    """Each hostile payload fails with the serialization/mapping category; nothing ran."""
    with os_system_extension(), pytest.raises(MongoDBMappingError) as caught:
        loads(corpus(str(sentinel))[name], POLICY)
    assert caught.value.category in ("serialization", "mapping", "type_not_permitted")
    assert not sentinel.exists()


def test_restricted_load_value_errors_are_serialization_errors(sentinel: Path) -> None:
    """Seed: "Restricted-load ValueError failures, including unregistered EXT codes, are
    translated to the same stable category"."""
    with pytest.raises(MongoDBSerializationError):
        loads(wrap(b"\x82\x7b"), POLICY)  # EXT1 123, registered nowhere
    with pytest.raises(MongoDBSerializationError) as caught:
        loads(wrap(call(glob(HOSTILE, "Level"), b"K\x07")), POLICY)  # Level(7): ValueError
    assert isinstance(caught.value.__cause__, ValueError)
    assert loads(wrap(call(glob(HOSTILE, "Level"), b"K\x01")), POLICY) == {
        "state": hostile_types.Level.LOW
    }


def test_listed_plain_dataclass_still_loads(sentinel: Path) -> None:
    """The allowlist works for well-behaved classes: NEWOBJ() + BUILD(dict) loads."""
    payload = wrap(glob(HOSTILE, "Plain") + b")\x81}(" + text("name") + text("n")
                   + text("size") + b"K\x02ub")  # fmt: skip
    assert loads(payload, POLICY) == {"state": hostile_types.Plain("n", 2)}


@pytest.mark.parametrize("name", ["os.system", "listed-__setstate__-BUILD", "builtins.open"])
async def test_storage_load_refuses_tampered_documents(
    make_storage: StorageFactory, collection: Any, sentinel: Path, name: str
) -> None:
    """Through the public API: a document whose bytes were replaced is refused on load."""
    storage = make_storage(allowed_checkpoint_types=hostile_types.ALL)
    checkpoint = make_checkpoint()
    await storage.save(checkpoint)
    payload = corpus(str(sentinel))[name]
    await collection.update_one(
        {"checkpoint_id": checkpoint.checkpoint_id}, {"$set": {"checkpoint": Binary(payload)}}
    )
    for read in _reads(storage, checkpoint.checkpoint_id):
        with pytest.raises(MongoDBMappingError):
            await read()
        assert not ran(sentinel)


def ran(sentinel: Path) -> bool:
    return sentinel.exists()


def _reads(storage: Any, checkpoint_id: str) -> list[Callable[[], Any]]:
    name = storage.options.workflow_name
    return [
        lambda: storage.load(checkpoint_id),
        lambda: storage.get_latest(workflow_name=name),
        lambda: storage.list_checkpoints(workflow_name=name),
    ]


async def test_not_found_is_not_confused_with_refusal(make_storage: StorageFactory) -> None:
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await make_storage().load("absent")
    assert os.environ.get(SENTINEL_ENV) is None


def test_memo_writes_other_than_memoize_are_refused(sentinel: Path) -> None:
    """The controlled pickler (protocol 5) writes only MEMOIZE; the verifier keeps its memo
    as a list that MEMOIZE appends to and refuses BINPUT/LONG_BINPUT outright."""
    for put in (b"q\x00", b"r\x00\x00\x00\x00"):
        with pytest.raises(MongoDBSerializationError, match="not allowed"):
            loads(PROTO + b"}" + put + text("state") + b"N" + b"s.", POLICY)
    assert loads(PROTO + b"}\x94" + text("a") + b"\x94h\x01s.", POLICY) == {"a": "a"}


def test_mutated_streams_never_execute_and_fail_in_one_category(sentinel: Path) -> None:
    """Random byte edits of real and hostile payloads exercise the verifier's fused fast
    paths with malformed input: every outcome is a loaded dict or a mapping-category
    refusal, and nothing a payload names ever runs."""
    rng = random.Random(20261129)
    seeds = [
        dumps({"state": [hostile_types.Plain("n", 2), {"k": ("t", 1.5)}, hostile_types.Level.LOW]},
              POLICY),
        *corpus(str(sentinel)).values(),
        *class_corpus().values(),
    ]  # fmt: skip
    policy = TypePolicy(hostile_types.ALL + hostile_classes.ALL)
    with os_system_extension():
        _mutate_and_load(rng, seeds, policy, sentinel)


def _mutate_and_load(
    rng: random.Random, seeds: list[bytes], policy: TypePolicy, sentinel: Path
) -> None:
    for _ in range(3000):
        payload = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(payload))
            edit = rng.random()
            if edit < 0.6:
                payload[at] = rng.randrange(256)
            elif edit < 0.8:
                del payload[at]
            else:
                payload.insert(at, rng.randrange(256))
        try:
            assert type(loads(bytes(payload), policy)) is dict
        except MongoDBMappingError as exc:
            assert exc.category in ("serialization", "mapping", "type_not_permitted")
        assert not sentinel.exists()
