"""Every test of the storage, run by this one module (with the contract test beside it).

The tests that prove the storage's documented behaviour, each docstring
quoting the sentence it proves, are all collected here, so that

    pytest tests/agent_framework_mongodb/test_checkpoint_storage.py \
        tests/contracts/test_checkpoint_storage_contract.py

runs all of them. This module holds the protocol seam, scope binding,
ordering, listing, paging and idempotency; the ``checks_*`` modules hold the
rest (their names do not start with ``test_``, so pytest collects each test
once, here): serialization in ``checks_codec``, hostile pickles and classes in
``checks_hostile_pickles`` and ``checks_hostile_classes``, lifecycle (TTL,
counters, cleanup, indexes, compatibility gates) in ``checks_lifecycle``,
sequences under contention in ``checks_sequences``, input validation in
``checks_inputs``, failures, cancellation, ownership and logs in
``checks_failures``, and real workflows in ``checks_workflows``. Fixtures all
live in ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_framework import CheckpointStorage, WorkflowCheckpointException
from pymongo import AsyncMongoClient, monitoring

import agent_framework_mongodb
from agent_framework_mongodb import (
    MongoDBAuthorizationError,
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBInvalidCursorError,
    MongoDBSerializationError,
)
from agent_framework_mongodb.indexes import CHECKPOINT_KIND
from agent_framework_mongodb.paging import encode_cursor
from tests.agent_framework_mongodb import (
    checks_codec,
    checks_failures,
    checks_hostile_classes,
    checks_hostile_pickles,
    checks_inputs,
    checks_lifecycle,
    checks_refusals,
    checks_seed_gaps,
    checks_sequences,
    checks_type_hints,
    checks_workflows,
)
from tests.agent_framework_mongodb.af_workflows import WORKFLOW_NAME
from tests.agent_framework_mongodb.checks_codec import *  # noqa: F403
from tests.agent_framework_mongodb.checks_codec import LISTED, rich_state
from tests.agent_framework_mongodb.checks_failures import *  # noqa: F403
from tests.agent_framework_mongodb.checks_hostile_classes import *  # noqa: F403
from tests.agent_framework_mongodb.checks_hostile_pickles import *  # noqa: F403
from tests.agent_framework_mongodb.checks_inputs import *  # noqa: F403
from tests.agent_framework_mongodb.checks_lifecycle import *  # noqa: F403
from tests.agent_framework_mongodb.checks_refusals import *  # noqa: F403
from tests.agent_framework_mongodb.checks_seed_gaps import *  # noqa: F403
from tests.agent_framework_mongodb.checks_sequences import *  # noqa: F403
from tests.agent_framework_mongodb.checks_type_hints import *  # noqa: F403
from tests.agent_framework_mongodb.checks_workflows import *  # noqa: F403
from tests.agent_framework_mongodb.conftest import StorageFactory, make_checkpoint
from tests.agent_framework_mongodb.faults import CollectionProxy

PACKAGE = Path(agent_framework_mongodb.__file__).parent
REPO = Path(__file__).resolve().parents[2]
CHECKS = (
    checks_codec, checks_failures, checks_hostile_classes, checks_hostile_pickles, checks_inputs,
    checks_lifecycle, checks_refusals, checks_seed_gaps, checks_sequences, checks_type_hints,
    checks_workflows,
)  # fmt: skip


def test_this_module_collects_every_check() -> None:
    """Every test of every ``checks_*`` module is collected here, under its own name (no two
    share one), and no ``checks_*`` module defines a fixture that could shadow another."""
    here = globals()
    names = [name for module in CHECKS for name in vars(module) if name.startswith("test_")]
    assert len(names) == len(set(names)) and len(names) > 50
    for module in CHECKS:
        for name, value in vars(module).items():
            if name.startswith("test_"):
                assert here[name] is value, f"{module.__name__}.{name}"
            assert not hasattr(value, "_fixture_function"), f"{module.__name__}.{name}"
    checks = {p.stem for p in Path(__file__).parent.glob("checks_*.py")}
    assert checks == {module.__name__.rsplit(".", 1)[1] for module in CHECKS}


def test_derives_from_public_protocol_without_private_imports() -> None:
    """Seed: "explicitly derives from the public Agent Framework Core 1.13 CheckpointStorage
    protocol" and "It does not import or reflect over framework internals"."""
    assert CheckpointStorage in MongoDBCheckpointStorage.__mro__
    for source in PACKAGE.glob("*.py"):
        text = source.read_text()
        assert "agent_framework._" not in text, source.name
        assert "from agent_framework." not in text.replace("from agent_framework.exceptions", "")


async def test_save_load_returns_caller_owned_copies(make_storage: StorageFactory) -> None:
    """Framework contract: save stores a copy, load returns a fresh copy each time."""
    storage = make_storage()
    checkpoint = make_checkpoint(state={"items": [1, 2]})
    assert await storage.save(checkpoint) == checkpoint.checkpoint_id
    checkpoint.state["items"].append(3)  # the caller mutates after save
    first = await storage.load(checkpoint.checkpoint_id)
    first.state["items"].append(4)
    second = await storage.load(checkpoint.checkpoint_id)
    assert first is not second
    assert second.state == {"items": [1, 2]}


async def test_save_snapshots_before_its_first_await(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Framework contract: a save in flight is unaffected by later mutation of the checkpoint."""
    proxy = CollectionProxy(collection)
    release, entered = asyncio.Event(), asyncio.Event()

    async def held(real: Any, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        await release.wait()
        return await real(*args, **kwargs)

    proxy.intercept("insert_one", held)
    storage = make_storage(target=proxy)
    checkpoint = make_checkpoint(state={"v": "original"})
    task = asyncio.create_task(storage.save(checkpoint))
    await entered.wait()
    checkpoint.state["v"] = "mutated while saving"
    release.set()
    await task
    assert (await storage.load(checkpoint.checkpoint_id)).state == {"v": "original"}


async def test_missing_id_is_not_found_and_framework_exception(
    make_storage: StorageFactory,
) -> None:
    """Seed: "Missing authorized records raise MongoDBCheckpointNotFoundError, which is both
    an integration retrieval error and the framework's WorkflowCheckpointException"."""
    with pytest.raises(WorkflowCheckpointException) as caught:
        await make_storage().load("does-not-exist")
    assert isinstance(caught.value, MongoDBCheckpointNotFoundError)
    assert caught.value.category == "not_found"


async def test_foreign_workflow_names_are_refused(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "workflow_name arguments and checkpoint payloads must equal the bound value"
    (deliberately stricter than the framework's multi-workflow conformance tests)."""
    storage = make_storage()
    with pytest.raises(MongoDBAuthorizationError):
        await storage.save(make_checkpoint(workflow_name="other-workflow"))
    for call in (storage.get_latest, storage.list_checkpoints, storage.list_checkpoint_ids):
        with pytest.raises(MongoDBAuthorizationError):
            await call(workflow_name="other-workflow")
    with pytest.raises(MongoDBAuthorizationError):
        await storage.list_checkpoint_page(workflow_name="other-workflow")
    assert await collection.count_documents({}) == 0


async def test_delete_is_scoped_and_reports_existence(make_storage: StorageFactory) -> None:
    storage = make_storage()
    checkpoint = make_checkpoint()
    await storage.save(checkpoint)
    assert await storage.delete(checkpoint.checkpoint_id) is True
    assert await storage.delete(checkpoint.checkpoint_id) is False
    assert await storage.get_latest(workflow_name=WORKFLOW_NAME) is None


async def test_order_is_sequence_not_timestamp_or_iteration(make_storage: StorageFactory) -> None:
    """Seed: "Ordering is (sequence, checkpoint_id), not timestamp or iteration_count" and
    "get_latest() sorts by descending sequence and checkpoint ID"."""
    storage = make_storage()
    saved = []
    for i in range(5):
        checkpoint = make_checkpoint(checkpoint_id=f"z-{9 - i}", iteration=5 - i)
        checkpoint.timestamp = f"2020-01-0{9 - i}T00:00:00+00:00"  # newest first on the clock
        await storage.save(checkpoint)
        saved.append(checkpoint.checkpoint_id)
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME) == saved
    listed = await storage.list_checkpoints(workflow_name=WORKFLOW_NAME)
    assert [c.checkpoint_id for c in listed] == saved
    latest = await storage.get_latest(workflow_name=WORKFLOW_NAME)
    assert latest is not None and latest.checkpoint_id == saved[-1]


async def test_inherited_lists_fetch_bounded_pages(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "The inherited list methods enumerate the complete authorized run in
    deterministic order by repeatedly fetching configured bounded pages"."""
    writer = make_storage()
    ids = [make_checkpoint(checkpoint_id=f"cp-{i:02}") for i in range(11)]
    for checkpoint in ids:
        await writer.save(checkpoint)
    proxy = CollectionProxy(collection)
    reader = make_storage(target=proxy, page_size=3, max_page_size=3)
    listed = await reader.list_checkpoints(workflow_name=WORKFLOW_NAME)
    assert [c.checkpoint_id for c in listed] == [c.checkpoint_id for c in ids]
    assert proxy.methods().count("find") >= 4
    assert await reader.list_checkpoint_ids(workflow_name=WORKFLOW_NAME) == [
        c.checkpoint_id for c in ids
    ]


async def test_checkpoint_pages_and_cursor_rules(make_storage: StorageFactory) -> None:
    """Seed: "list_checkpoint_page(..., cursor=None, limit=None) ... The default page size is
    100, the configurable hard maximum defaults to 1000, and invalid or unknown-version
    cursors fail closed"."""
    storage = make_storage()
    assert (storage.options.page_size, storage.options.max_page_size) == (100, 1000)
    for i in range(7):
        await storage.save(make_checkpoint(checkpoint_id=f"p-{i}"))
    seen, cursor, sizes = [], None, []
    while True:
        page = await storage.list_checkpoint_page(
            workflow_name=WORKFLOW_NAME, cursor=cursor, limit=3
        )
        sizes.append(len(page.checkpoints))
        seen += [c.checkpoint_id for c in page.checkpoints]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [f"p-{i}" for i in range(7)] and sizes == [3, 3, 1]
    assert cursor is not None
    whole = await storage.list_checkpoint_page(workflow_name=WORKFLOW_NAME)
    assert len(whole.checkpoints) == 7 and whole.next_cursor is None
    for limit in (0, 1001, -1, 2.5):
        with pytest.raises(MongoDBConfigurationError):
            await storage.list_checkpoint_page(workflow_name=WORKFLOW_NAME, limit=limit)  # type: ignore[arg-type]
    other_scope = make_storage(session_id="run-2").options.scope_discriminator
    bad = ["", "!!!", "bm90IGpzb24", encode_cursor(other_scope, 1, "p-0"), cursor[:-2] + "xx"]
    bad.append(cursor.replace(cursor[:4], "WzIs"))  # version 2
    for value in bad:
        with pytest.raises(MongoDBInvalidCursorError):
            await storage.list_checkpoint_page(workflow_name=WORKFLOW_NAME, cursor=value)


async def test_identical_retry_returns_same_id_and_conflict_is_refused(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "An identical retry returns the same ID. Reusing the ID with different public
    state raises MongoDBConcurrencyError."""
    storage = make_storage()
    checkpoint = make_checkpoint(checkpoint_id="same", state={"a": {"x", "y"}, "b": 1})
    assert await storage.save(checkpoint) == "same"
    retry = make_checkpoint(checkpoint_id="same", state={"b": 1, "a": {"y", "x"}})
    retry.timestamp = checkpoint.timestamp
    assert await storage.save(retry) == "same"  # dict/set order do not matter
    retry.state["b"] = 2
    with pytest.raises(MongoDBConcurrencyError):
        await storage.save(retry)
    assert await collection.count_documents({"_kind": CHECKPOINT_KIND}) == 1
    assert (await storage.load("same")).state == {"a": {"x", "y"}, "b": 1}


HASH_SCRIPT = """
from tests.agent_framework_mongodb.checks_codec import POLICY, rich_state
from tests.agent_framework_mongodb.conftest import make_checkpoint
from agent_framework_mongodb.canonical import canonical_hash
checkpoint = make_checkpoint(checkpoint_id="fixed", state=rich_state())
checkpoint.timestamp = "2026-01-01T00:00:00+00:00"
print(canonical_hash(checkpoint.to_dict(), POLICY))
"""


async def test_canonical_idempotency_holds_across_processes_and_hash_seeds(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "The same logical checkpoint therefore hashes identically across processes and
    PYTHONHASHSEED values" (sets of strings iterate differently under each seed), so an
    identical retry from any process matches the stored payload_hash."""

    def run(seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", HASH_SCRIPT], cwd=REPO, env=env, capture_output=True,
            text=True, check=True, timeout=120,
        )  # fmt: skip
        return out.stdout.strip()

    hashes = await asyncio.gather(*(asyncio.to_thread(run, s) for s in ("0", "1", "4242")))
    storage = make_storage(allowed_checkpoint_types=LISTED)
    checkpoint = make_checkpoint(checkpoint_id="fixed", state=rich_state())
    checkpoint.timestamp = "2026-01-01T00:00:00+00:00"
    await storage.save(checkpoint)
    stored = await collection.find_one({"checkpoint_id": "fixed"})
    assert stored is not None
    assert set(hashes) == {stored["payload_hash"]}


async def test_concurrent_saves_get_unique_positive_monotonic_sequences(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Seed: "Concurrent saves therefore receive unique, positive, monotonic sequences"."""
    storages = [make_storage() for _ in range(4)]
    checkpoints = [make_checkpoint(checkpoint_id=f"c-{i:02}") for i in range(40)]
    await asyncio.gather(*(storages[i % 4].save(c) for i, c in enumerate(checkpoints)))
    sequences = [d["sequence"] async for d in collection.find({"_kind": CHECKPOINT_KIND})]
    assert len(sequences) == 40 and len(set(sequences)) == 40 and min(sequences) >= 1
    after = make_checkpoint(checkpoint_id="after")
    await storages[0].save(after)
    document = await collection.find_one({"checkpoint_id": "after"})
    assert document is not None and document["sequence"] > max(sequences)


class _Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_each_page_is_one_round_trip(
    make_storage: StorageFactory, mongo_uri: str, collection: Any
) -> None:
    """A page of 100 comes back in the find reply itself (no getMore per page); a storage
    reads the collection's cursor secret once (one more find)."""
    writer = make_storage()
    for i in range(205):
        await writer.save(make_checkpoint(checkpoint_id=f"r-{i:03}"))
    listener = _Commands()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_uri, event_listeners=[listener]
    )
    try:
        reader = make_storage(target=client[collection.database.name][collection.name])
        listed = await reader.list_checkpoints(workflow_name=WORKFLOW_NAME)
        ids = await reader.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)
    finally:
        await client.close()
    assert len(listed) == len(ids) == 205
    assert listener.names.count("find") == 3 + 3 + 1 and "getMore" not in listener.names


async def test_paging_restores_the_garbage_collector(
    make_storage: StorageFactory, collection: Any
) -> None:
    """Pages are decoded with the collector paused; its state is always restored, also after a
    refused document, and a caller that disabled it keeps it disabled."""
    storage = make_storage()
    for i in range(3):
        await storage.save(make_checkpoint(checkpoint_id=f"g-{i}"))
    assert gc.isenabled()
    await storage.list_checkpoint_page(workflow_name=WORKFLOW_NAME)
    assert gc.isenabled()
    gc.disable()
    try:
        await storage.list_checkpoint_page(workflow_name=WORKFLOW_NAME)
        assert not gc.isenabled()
    finally:
        gc.enable()
    await collection.update_one({"checkpoint_id": "g-1"}, {"$set": {"checkpoint": b"\x80\x05."}})
    with pytest.raises(MongoDBSerializationError):
        await storage.list_checkpoints(workflow_name=WORKFLOW_NAME)
    assert gc.isenabled()
