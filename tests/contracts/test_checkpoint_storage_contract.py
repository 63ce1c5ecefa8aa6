"""The storage against its language-neutral contract fixture, on a real mongod.

Seed: "Language-neutral outcomes are in
python/tests/contracts/fixtures/checkpoint_storage_contract.json": document
shape, ordering, cursor rules, error categories, hash vectors and the index
table. Another implementation can run the same fixture.
"""

from __future__ import annotations

import datetime
import json
import math
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint
from pymongo import AsyncMongoClient

import agent_framework_mongodb as package
from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions
from agent_framework_mongodb.canonical import canonical_hash
from agent_framework_mongodb.indexes import CHECKPOINT_KIND, COUNTER_KIND, INDEX_SPECS
from agent_framework_mongodb.paging import encode_cursor
from agent_framework_mongodb.typepolicy import TypePolicy
from tests.contracts.values import build_value
from tests.support.mongod import mongodb_uri

CONTRACT = json.loads(
    (Path(__file__).parent / "fixtures" / "checkpoint_storage_contract.json").read_text()
)
WORKFLOW = "approval-workflow"
Factory = Callable[..., MongoDBCheckpointStorage]


@pytest.fixture
async def make_storage() -> AsyncIterator[Factory]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongodb_uri())
    collection = client["agentflow_tests"][f"test-checkpoint-{uuid.uuid4().hex}"]

    def make(**overrides: Any) -> MongoDBCheckpointStorage:
        values: dict[str, Any] = {
            "tenant_id": "tenant-1", "application_id": "application-1",
            "workflow_name": WORKFLOW, "session_id": "run-1", **overrides,
        }  # fmt: skip
        return MongoDBCheckpointStorage(
            MongoDBCheckpointStorageOptions(**values), collection=collection
        )

    try:
        yield make
    finally:
        await collection.drop()
        await client.close()


def checkpoint(checkpoint_id: str, state: Any = None, **fields: Any) -> WorkflowCheckpoint:
    return WorkflowCheckpoint(
        workflow_name=WORKFLOW, graph_signature_hash="g", checkpoint_id=checkpoint_id,
        state={"v": state}, **fields,
    )  # fmt: skip


@pytest.mark.parametrize("vector", CONTRACT["hash_vectors"], ids=lambda v: v["name"])
def test_hash_vectors(vector: dict[str, Any]) -> None:
    assert canonical_hash(build_value(vector["value"]), TypePolicy()) == vector["sha256"]


def test_hash_relations() -> None:
    by_name = {v["name"]: v["sha256"] for v in CONTRACT["hash_vectors"]}
    for left, right in CONTRACT["hash_relations"]["equal"]:
        assert by_name[left] == by_name[right]
    for left, right in CONTRACT["hash_relations"]["different"]:
        assert by_name[left] != by_name[right]


@pytest.mark.parametrize("scope", CONTRACT["scopes"], ids=lambda s: s["scope_discriminator"][:8])
def test_scope_identities(scope: dict[str, Any]) -> None:
    options = MongoDBCheckpointStorageOptions(
        tenant_id=scope["tenant_id"], application_id=scope["application_id"],
        workflow_name=scope["workflow_name"], session_id=scope["session_id"],
    )  # fmt: skip
    assert options.scope_discriminator == scope["scope_discriminator"]
    assert options.document_id("cp-1") == scope["document_id_of_cp-1"]
    assert options.counter_id() == scope["counter_id"]
    assert encode_cursor(options.scope_discriminator, 7, "cp-7") == scope["cursor_after_7_cp-7"]


async def test_document_shape(make_storage: Factory) -> None:
    spec = CONTRACT["document"]
    storage = make_storage()
    await storage.save(checkpoint("cp-1"))
    collection = storage._collection
    document = await collection.find_one({"_kind": spec["kind"]})
    assert document is not None and sorted(document) == sorted(spec["fields"])
    for key in ("schema_version", "framework_version", "payload_version",
                "idempotency_hash_version"):  # fmt: skip
        assert document[key] == spec[key]
    assert await collection.count_documents({"_kind": spec["counter_kind"]}) == 1
    assert (spec["kind"], spec["counter_kind"]) == (CHECKPOINT_KIND, COUNTER_KIND)
    ttl_storage = make_storage(session_id="ttl", ttl=datetime.timedelta(hours=1))
    await ttl_storage.save(checkpoint("cp-2"))
    with_ttl = await collection.find_one({"checkpoint_id": "cp-2"})
    assert with_ttl is not None
    assert sorted(with_ttl) == sorted(spec["fields"] + spec["fields_with_ttl"])


@pytest.mark.parametrize("case", CONTRACT["ordering"]["cases"], ids=lambda c: c["name"])
async def test_ordering(make_storage: Factory, case: dict[str, Any]) -> None:
    storage = make_storage()
    for save in case["saves"]:
        await storage.save(checkpoint(**save))
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW) == case["expected_order"]
    latest = await storage.get_latest(workflow_name=WORKFLOW)
    assert (latest.checkpoint_id if latest else None) == case["expected_latest"]


@pytest.mark.parametrize("case", CONTRACT["paging"]["cases"], ids=str)
async def test_paging(make_storage: Factory, case: dict[str, Any]) -> None:
    paging = CONTRACT["paging"]
    storage = make_storage()
    options = storage.options
    assert (options.page_size, options.max_page_size) == (
        paging["default_page_size"], paging["default_max_page_size"]
    )  # fmt: skip
    for i in range(case["count"]):
        await storage.save(checkpoint(f"cp-{i:03}"))
    sizes, cursor = [], None
    while True:
        page = await storage.list_checkpoint_page(
            workflow_name=WORKFLOW, cursor=cursor, limit=case["limit"]
        )
        sizes.append(len(page.checkpoints))
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sizes == case["page_sizes"]


async def test_invalid_limits_and_cursors(make_storage: Factory) -> None:
    paging = CONTRACT["paging"]
    storage = make_storage()
    for limit in paging["invalid_limits"]:
        with pytest.raises(package.MongoDBConfigurationError):
            await storage.list_checkpoint_page(workflow_name=WORKFLOW, limit=limit)
    foreign = make_storage(session_id="other").options.scope_discriminator
    for case in paging["invalid_cursors"]:
        cursor = case.get("cursor") or encode_cursor(foreign, 1, "cp-000")
        with pytest.raises(package.MongoDBInvalidCursorError) as caught:
            await storage.list_checkpoint_page(workflow_name=WORKFLOW, cursor=cursor)
        assert caught.value.category == paging["error_category"], case["name"]


def test_error_categories_and_hierarchy() -> None:
    spec = CONTRACT["errors"]
    for name, category in spec["categories"].items():
        assert getattr(package, name).category == category
        assert getattr(package, name).retryable == (name in spec["retryable"])
    for child, parent in spec["subtypes"]:
        assert issubclass(getattr(package, child), getattr(package, parent))


async def test_error_cases(make_storage: Factory) -> None:
    storage = make_storage()
    await storage.save(checkpoint("taken", 1))
    await storage.save(checkpoint("legacy", 1))
    await storage._collection.update_one(
        {"checkpoint_id": "legacy"}, {"$set": {"idempotency_hash_version": 1}}
    )
    cycle: list[Any] = []
    cycle.append(cycle)
    actions: dict[tuple[str, str], Callable[[], Awaitable[object]]] = {
        ("load", "missing id"): lambda: storage.load("missing"),
        ("save", "foreign workflow name"): lambda: storage.save(
            WorkflowCheckpoint(workflow_name="other", graph_signature_hash="g")
        ),
        ("get_latest", "foreign workflow name"): lambda: storage.get_latest(workflow_name="x"),
        ("save", "non-finite float"): lambda: storage.save(checkpoint("f", math.inf)),
        ("save", "reference cycle"): lambda: storage.save(checkpoint("c", cycle)),
        ("save", "mapping subclass"): lambda: storage.save(checkpoint("m", OrderedDict())),
        ("save", "same id, different state"): lambda: storage.save(checkpoint("taken", 2)),
        ("load", "hash version 1"): lambda: storage.load("legacy"),
        ("save", "lone surrogate in checkpoint id"): lambda: storage.save(checkpoint("\ud800")),
        ("save", "lone surrogate in parent id"): lambda: storage.save(
            checkpoint("p", previous_checkpoint_id="\udc00")
        ),
        ("save", "object as dict key"): lambda: storage.save(checkpoint("k", {object(): 1})),
    }
    for case in CONTRACT["errors"]["cases"]:
        with pytest.raises(package.MongoDBCheckpointStorageError) as caught:
            await actions[(case["operation"], case["setup"])]()
        assert caught.value.category == case["category"], case


def test_index_table() -> None:
    expected = CONTRACT["indexes"]
    assert [
        {"name": s.name, "keys": [k for k, _ in s.keys], "unique": s.unique, "kind": s.kind,
         "ttl": s.ttl}
        for s in INDEX_SPECS
    ] == expected  # fmt: skip
