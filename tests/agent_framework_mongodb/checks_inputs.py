"""Inputs that must fail closed, in a stable category, before anything is spent or sent.

Seed: "invalid or unknown-version cursors fail closed", "Bad input ... a clear,
typed error", and "Corrupted stored data raises": cursors are accepted only
in the exact form the storage issued, strings MongoDB cannot store (lone
surrogates) are refused before a sequence is allocated, damaged stored
documents raise ``MongoDBMappingError`` rather than ``KeyError``, and the
package's logger never prints on its own.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agent_framework_mongodb import (
    MongoDBCheckpointStorage,
    MongoDBConfigurationError,
    MongoDBInvalidCursorError,
    MongoDBMappingError,
)
from agent_framework_mongodb.indexes import CHECKPOINT_KIND
from agent_framework_mongodb.paging import encode_cursor
from tests.agent_framework_mongodb.af_workflows import WORKFLOW_NAME
from tests.agent_framework_mongodb.conftest import StorageFactory, make_checkpoint, scope_options
from tests.agent_framework_mongodb.faults import (
    CollectionProxy,
    io_besides_the_refusal,
    refusal_recorded,
)

REPO = Path(__file__).resolve().parents[2]
LONE = "\ud800"
MAC_SHAPED = "A" * 22


def cursor_of(body: list[Any], *, compact: bool = True, ascii_only: bool = True) -> str:
    text = json.dumps(body, separators=(",", ":") if compact else None, ensure_ascii=ascii_only)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def noncanonical_cursors(scope: str) -> dict[str, str]:
    """Name -> a cursor that is not exactly one the storage issues.

    Each carries a MAC-shaped suffix: the body is checked before the MAC (and
    before the collection's secret is read), so none needs a valid one.
    """
    prefix, position = scope[:16], [7, "~~~"]  # "~~~" puts "-" into the urlsafe base64
    good = encode_cursor(scope, 7, "~~~")
    assert good == cursor_of([1, prefix, *position]) and "-" in good
    bodies = {
        "padded": good + "=" * (-len(good) % 4 or 4),
        "inner junk": good[:4] + "!" + good[4:],
        "line break": good[:8] + "\n" + good[8:],
        "standard alphabet": good.replace("-", "+").replace("_", "/"),
        "json with spaces": cursor_of([1, prefix, *position], compact=False),
        "unescaped unicode": cursor_of([1, prefix, 7, "\u00e9"], ascii_only=False),
        "version true": cursor_of([True, prefix, *position]),
        "version 1.0": cursor_of([1.0, prefix, *position]),
        "sequence 2**70": cursor_of([1, prefix, 2**70, "~~~"]),
        "sequence 0": cursor_of([1, prefix, 0, "~~~"]),
        "sequence true": cursor_of([1, prefix, True, "~~~"]),
        "lone surrogate id": cursor_of([1, prefix, 7, LONE]),
        "another scope": encode_cursor("f" * 64, 7, "~~~"),
    }
    return {"unsigned": good, **{name: f"{body}.{MAC_SHAPED}" for name, body in bodies.items()}}


@pytest.mark.parametrize("name", sorted(noncanonical_cursors("0" * 64)))
async def test_cursors_are_accepted_only_in_their_exact_form(
    recording: CollectionProxy, name: str
) -> None:
    """Seed: "invalid or unknown-version cursors fail closed": the version is the int 1
    itself, the base64 and JSON are the canonical ones, the scope is this one, the sequence
    fits a BSON int64, the ID is storable and a MAC follows; anything else is
    MongoDBInvalidCursorError before any query is sent."""
    storage = MongoDBCheckpointStorage(scope_options(), collection=recording)
    cursor = noncanonical_cursors(storage.options.scope_discriminator)[name]
    with pytest.raises(MongoDBInvalidCursorError):
        await storage.list_checkpoint_page(workflow_name=WORKFLOW_NAME, cursor=cursor)
    assert recording.calls == []


async def test_issued_cursors_round_trip(make_storage: StorageFactory) -> None:
    storage = make_storage(page_size=2)
    for i in range(3):
        await storage.save(make_checkpoint(checkpoint_id=f"c-{i}"))
    first = await storage.list_checkpoint_page(workflow_name=WORKFLOW_NAME)
    assert first.next_cursor is not None
    rest = await storage.list_checkpoint_page(workflow_name=WORKFLOW_NAME, cursor=first.next_cursor)
    assert [c.checkpoint_id for c in rest.checkpoints] == ["c-2"]


async def test_lone_surrogates_are_refused_before_a_sequence_is_spent(
    recording: CollectionProxy,
) -> None:
    """A lone surrogate cannot be stored as UTF-8: in a checkpoint's ID or parent it is a
    MongoDBMappingError before any MongoDB call (no sequence allocated; only the refusal is
    recorded, without the ID); as an argument to load or delete, or as a scope value, a
    MongoDBConfigurationError, equally early."""
    storage = MongoDBCheckpointStorage(scope_options(), collection=recording)
    for checkpoint in (
        make_checkpoint(checkpoint_id=f"id-{LONE}"),
        make_checkpoint(previous=f"parent-{LONE}"),
    ):
        with pytest.raises(MongoDBMappingError) as caught:
            await storage.save(checkpoint)
        assert caught.value.category == "mapping"
    assert io_besides_the_refusal(recording) == [] and refusal_recorded(recording)
    recording.calls.clear()
    for call in (storage.load, storage.delete):
        with pytest.raises(MongoDBConfigurationError):
            await call(f"id-{LONE}")
    for field in ("tenant_id", "application_id", "workflow_name", "session_id"):
        with pytest.raises(MongoDBConfigurationError):
            scope_options(**{field: f"value-{LONE}"})
    assert recording.calls == []


ORDERED_READS = ("ids", "list", "latest", "load")
#: Damage -> (the update that does it, the calls that must then fail).
DAMAGE: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "sequence missing": ({"$unset": {"sequence": ""}}, ORDERED_READS),
    "sequence not an int": ({"$set": {"sequence": "12"}}, (*ORDERED_READS, "save")),
    "sequence a bool": ({"$set": {"sequence": True}}, (*ORDERED_READS, "save")),
    "checkpoint_id missing": ({"$unset": {"checkpoint_id": ""}}, ("ids", "list", "latest")),
    "parent edge rewritten": ({"$set": {"parent_checkpoint_id": "elsewhere"}}, ("list", "load")),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_damaged_documents_are_mapping_errors(
    make_storage: StorageFactory, collection: Any, damage: str
) -> None:
    """Seed: "Corrupted stored data raises": a stored checkpoint without a valid sequence or
    checkpoint ID, or whose lineage field disagrees with its payload, fails every read that
    uses them with MongoDBMappingError, never KeyError or a silent skip; so does the next save
    when the damaged sequence sorts above every number and is therefore what it reads as the
    retained maximum."""
    storage = make_storage()
    for i in range(2):
        await storage.save(make_checkpoint(checkpoint_id=f"d-{i}", previous=f"p-{i}"))
    update, failing = DAMAGE[damage]
    await collection.update_one({"checkpoint_id": "d-1"}, update)
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "ids": lambda: storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME),
        "list": lambda: storage.list_checkpoints(workflow_name=WORKFLOW_NAME),
        "latest": lambda: storage.get_latest(workflow_name=WORKFLOW_NAME),
        "load": lambda: storage.load("d-1"),
        "save": lambda: storage.save(make_checkpoint()),
    }
    for name in failing:
        with pytest.raises(MongoDBMappingError) as caught:
            await calls[name]()
        assert type(caught.value) is MongoDBMappingError, name
    assert await collection.count_documents({"_kind": CHECKPOINT_KIND}) == 2


NOT_FOUND_SCRIPT = """
import asyncio, sys
from agent_framework_mongodb import MongoDBCheckpointNotFoundError, MongoDBCheckpointStorage
from tests.agent_framework_mongodb.conftest import scope_options

async def main():
    options = scope_options(database_name="agentflow_tests", collection_name=sys.argv[2])
    async with MongoDBCheckpointStorage(options, connection_string=sys.argv[1]) as storage:
        try:
            await storage.load("absent")
        except MongoDBCheckpointNotFoundError:
            print("not found")

asyncio.run(main())
"""


def test_the_package_logger_prints_nothing_unless_configured(mongo_uri: str) -> None:
    """A library adds only a NullHandler: a failed load in an application that configured no
    logging must not reach stderr through Python's last-resort handler."""
    logger = logging.getLogger("agent_framework_mongodb")
    assert any(type(h) is logging.NullHandler for h in logger.handlers)
    out = subprocess.run(
        [sys.executable, "-c", NOT_FOUND_SCRIPT, mongo_uri, "test-checkpoint-logless"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip
    assert out.stdout.strip() == "not found"
    assert out.stderr == ""
