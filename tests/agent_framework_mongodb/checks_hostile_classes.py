"""No listed class runs its own code during save or load: one hostile class per kind of hook.

Seed: "That allowlist permits class resolution only ... A controlled pickler
... rejects custom hooks before they execute." Each payload below would run a
hook of a listed class under plain ``pickle.loads`` (the control test proves
it by the sentinel file); the restricted loader refuses every one, and saving
instances of the same classes is refused before any MongoDB call, the
sentinel untouched both times. Classes whose hooks the codec cannot reach
(dict-state classes with ``__setattr__`` or property setters, frozen
dataclasses, objects with custom ``__hash__``/``__eq__`` used as values) still
save and load, again without the sentinel.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bson.binary import Binary

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBMappingError,
    MongoDBSerializationError,
)
from agent_framework_mongodb.codec import loads
from agent_framework_mongodb.typepolicy import TypePolicy
from tests.agent_framework_mongodb import hostile_classes as hc
from tests.agent_framework_mongodb import hostile_types
from tests.agent_framework_mongodb.conftest import StorageFactory, make_checkpoint, scope_options
from tests.agent_framework_mongodb.faults import (
    CollectionProxy,
    io_besides_the_refusal,
    refusal_recorded,
)
from tests.agent_framework_mongodb.pickle_ops import (
    EMPTY_DICT,
    MARK,
    build,
    call,
    dict_of,
    frozenset_of,
    glob,
    integer,
    new,
    set_of,
    slot_state,
    text,
    wrap,
)

CLASSES = hc.__name__
TYPES = hostile_types.__name__
IMPORT_ONLY = "tests.agent_framework_mongodb.hostile_import"
POLICY_TYPES = (*hc.ALL, *hostile_types.ALL, f"{IMPORT_ONLY}:Child")
POLICY = TypePolicy(POLICY_TYPES)
REPO = Path(__file__).resolve().parents[2]


def made(name: str, module: str = CLASSES) -> bytes:
    """NEWOBJ of a listed class, BUILD with an empty state dict."""
    return build(new(glob(module, name)), EMPTY_DICT)


def class_corpus() -> dict[str, bytes]:
    """Kind -> payload; each runs a listed class's hook under plain ``pickle.loads``."""
    tuple_key = MARK + text("a") + made("HashKey") + b"t"
    return {
        "__hash__ of a dict key": wrap(dict_of((made("HashKey"), integer(1)))),
        "__hash__ of a set member": wrap(set_of(made("HashKey"))),
        "__hash__ of a frozenset member": wrap(frozenset_of(made("HashKey"))),
        "__hash__ inside a tuple key": wrap(dict_of((tuple_key, integer(1)))),
        "__eq__ of colliding keys": wrap(
            dict_of((made("EqKey"), integer(1)), (made("EqKey"), integer(2)))
        ),
        "enum __hash__ of a dict key": wrap(
            dict_of((call(glob(CLASSES, "HashEnum"), integer(1)), integer(1)))
        ),
        "__getattr__ reached by BUILD": wrap(made("GetAttr")),
        "__getattribute__ reached by BUILD": wrap(made("GetAttribute")),
        "__setattr__ reached by slot state": wrap(
            build(new(glob(CLASSES, "SlotSetAttr")), slot_state(x=integer(1)))
        ),
        "__setattr__ of a dict-state class by slot state": wrap(
            build(new(glob(CLASSES, "DictSetAttr")), slot_state(x=integer(1)))
        ),
        "property setter by slot state": wrap(
            build(new(glob(CLASSES, "PropertySetter")), slot_state(level=integer(1)))
        ),
        "property setter of a slotted class": wrap(
            build(new(glob(CLASSES, "SlotProperty")), slot_state(level=integer(1)))
        ),
        "data descriptor by slot state": wrap(
            build(new(glob(CLASSES, "SlotDescriptor")), slot_state(guarded=integer(1)))
        ),
        "__dict__ property reached by BUILD": wrap(
            build(new(glob(CLASSES, "DictProperty")), dict_of((text("a"), integer(1))))
        ),
        "__class__ switched by slot state": wrap(
            build(
                new(glob(CLASSES, "SlotPlain")),
                slot_state(__class__=glob(CLASSES, "SlotSetAttr"), x=integer(1)),
            )
        ),
        "enum metaclass __call__": wrap(call(glob(CLASSES, "MetaEnum"), integer(1))),
        "__eq__ of an enum member value": wrap(call(glob(CLASSES, "ObjectValueEnum"), integer(1))),
        "__del__ of an uninitialised instance": wrap(made("Finalizer")),
        "__setstate__ planted by a first BUILD": wrap(
            build(
                build(
                    new(glob(TYPES, "Plain")),
                    dict_of((text("__setstate__"), glob(TYPES, "Constructor"))),
                ),
                EMPTY_DICT,
            )
        ),
        "__init_subclass__ and __set_name__ on import": wrap(new(glob(IMPORT_ONLY, "Child"))),
    }


KINDS = sorted(class_corpus())


def touched(sentinel: Path) -> bool:
    return sentinel.exists()


def reset(sentinel: Path) -> None:
    sentinel.unlink(missing_ok=True)


def test_every_payload_runs_a_hook_under_plain_pickle(sentinel: Path) -> None:
    """Control: each payload really reaches its hook when nothing restricts it."""
    for kind, payload in class_corpus().items():
        sentinel.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            pickle.loads(payload)  # unrestricted on purpose: the control
        assert sentinel.exists(), kind
    sys.modules.pop(IMPORT_ONLY, None)  # the control imported it; the refusals must not


@pytest.mark.parametrize("kind", KINDS)
def test_restricted_loader_runs_no_hook(sentinel: Path, kind: str) -> None:
    with pytest.raises(MongoDBMappingError) as caught:
        loads(class_corpus()[kind], POLICY)
    assert caught.value.category in ("serialization", "mapping", "type_not_permitted")
    assert not sentinel.exists()
    assert IMPORT_ONLY not in sys.modules


@pytest.mark.parametrize("kind", KINDS)
async def test_tampered_documents_run_no_hook(
    make_storage: StorageFactory, collection: Any, sentinel: Path, kind: str
) -> None:
    """Through the public API: load, get_latest and the listing all refuse the bytes."""
    storage = make_storage(allowed_checkpoint_types=POLICY_TYPES)
    checkpoint = make_checkpoint()
    await storage.save(checkpoint)
    await collection.update_one(
        {"checkpoint_id": checkpoint.checkpoint_id},
        {"$set": {"checkpoint": Binary(class_corpus()[kind])}},
    )
    name = storage.options.workflow_name
    for read in (
        lambda: storage.load(checkpoint.checkpoint_id),
        lambda: storage.get_latest(workflow_name=name),
        lambda: storage.list_checkpoints(workflow_name=name),
    ):
        with pytest.raises(MongoDBMappingError):
            await read()
        assert not touched(sentinel)


#: Kind -> a value whose saving would have to run (or let a load run) a hook; built
#: lazily, because building a dict key or set member already hashes it.
REFUSED_VALUES: dict[str, Callable[[], Any]] = {
    "__hash__ of a dict key": lambda: {hc.HashKey(): 1},
    "__hash__ of a set member": lambda: {hc.HashKey()},
    "__hash__ of a frozenset member": lambda: frozenset({hc.HashKey()}),
    "__hash__ inside a tuple key": lambda: {("a", hc.HashKey()): 1},
    "__eq__ of colliding keys": lambda: {hc.EqKey(): 1, hc.EqKey(): 2},
    "enum __hash__ of a dict key": lambda: {hc.HashEnum.A: 1},
    "__getattr__": lambda: object.__new__(hc.GetAttr),
    "__getattribute__": lambda: object.__new__(hc.GetAttribute),
    "__setattr__ of a slotted class": lambda: hc.SlotSetAttr.__new__(hc.SlotSetAttr),
    "__delattr__ of a slotted class": lambda: hc.SlotDelAttr.__new__(hc.SlotDelAttr),
    "property of a slotted class": lambda: hc.SlotProperty.__new__(hc.SlotProperty),
    "data descriptor of a slotted class": lambda: hc.SlotDescriptor.__new__(hc.SlotDescriptor),
    "__dict__ property": lambda: object.__new__(hc.DictProperty),
    "enum metaclass __call__": lambda: hc.MetaEnum.A,
    "enum member value with __eq__": lambda: hc.ObjectValueEnum.A,
    "__del__": lambda: object.__new__(hc.Finalizer),
}


@pytest.mark.parametrize("kind", sorted(REFUSED_VALUES))
async def test_save_refuses_hooked_classes_before_io(
    recording: CollectionProxy, sentinel: Path, kind: str
) -> None:
    """Refused with MongoDBSerializationError before any MongoDB call; no hook ran."""
    state = {"v": [REFUSED_VALUES[kind]()]}  # building keys runs hooks: the test's, not ours
    reset(sentinel)
    storage = MongoDBCheckpointStorage(
        scope_options(allowed_checkpoint_types=POLICY_TYPES), collection=recording
    )
    with pytest.raises(MongoDBSerializationError):
        await storage.save(make_checkpoint(state=state))
    assert io_besides_the_refusal(recording) == [] and refusal_recorded(recording)
    assert not touched(sentinel)
    del state
    reset(sentinel)  # a Finalizer's own __del__, run by the test's cleanup


async def test_unreachable_hooks_keep_classes_usable(
    make_storage: StorageFactory, sentinel: Path
) -> None:
    """Dict-state classes with __setattr__ or property setters, frozen dataclasses, slotted
    plain classes, and objects with custom __hash__/__eq__ used as values save and load
    losslessly, and none of their hooks runs on either side."""
    on_dict = object.__new__(hc.DictSetAttr)
    on_dict.__dict__["x"] = 1
    values = [on_dict, hc.PropertySetter(), hc.FrozenRecord("n"), hc.SlotPlain(3), hc.HashKey(),
              hc.EqKey(), hc.HashEnum.A]  # fmt: skip
    storage = make_storage(allowed_checkpoint_types=POLICY_TYPES)
    checkpoint = make_checkpoint(state={"values": values})
    await storage.save(checkpoint)
    loaded = (await storage.load(checkpoint.checkpoint_id)).state["values"]
    assert [type(v) for v in loaded] == [type(v) for v in values]
    assert loaded[0].__dict__ == {"x": 1} and loaded[1].__dict__ == {"level": 1}
    assert loaded[2] == hc.FrozenRecord("n") and loaded[3].x == 3
    assert loaded[6] is hc.HashEnum.A
    assert not touched(sentinel)


LAZY_SCRIPT = """
import json, sys
import agent_framework
from agent_framework_mongodb import MongoDBMappingError
from agent_framework_mongodb.typepolicy import TypePolicy
lazy = sorted(set(agent_framework.__all__) - set(vars(agent_framework)))
before = set(sys.modules)
refused = 0
for name in lazy:
    try:
        TypePolicy().resolve("agent_framework", name)
    except MongoDBMappingError:
        refused += 1
print(json.dumps({"lazy": len(lazy), "refused": refused,
                  "imported": sorted(set(sys.modules) - before)}))
"""


def test_resolving_a_lazy_framework_export_imports_nothing() -> None:
    """The framework package resolves many names through a lazy module __getattr__ that
    imports submodules; the loader reads module dictionaries only, so every such name is
    refused and not one module is imported (checked in a fresh interpreter)."""
    out = subprocess.run(
        [sys.executable, "-c", LAZY_SCRIPT], cwd=REPO, capture_output=True, text=True,
        check=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["lazy"] > 0 and result["refused"] == result["lazy"]
    assert result["imported"] == []
