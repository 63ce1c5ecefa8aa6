"""Moving Agent Framework checkpoints from a stock storage (or the MongoDB one) into agentflow."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from agent_framework import (
    CheckpointStorage,
    FileCheckpointStorage,
    InMemoryCheckpointStorage,
    WorkflowCheckpoint,
)
from pymongo import AsyncMongoClient

from agent_framework_mongodb import (
    CheckpointCodec,
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageOptions,
)
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.errors import CheckpointNotSerializable
from agentflow.integrations.agent_framework import AgentflowCheckpointStorage, copy_checkpoints
from agentflow.integrations.agent_framework.migrate import lineage_order
from tests.agent_framework_mongodb.af_workflows import ALLOWED_TYPES
from tests.integrations import agent_framework_workflows as flows
from tests.support.mongod import mongodb_uri

Source = Callable[[Path], CheckpointStorage]
_CODEC = CheckpointCodec(ALLOWED_TYPES)


def _identities(checkpoints: list[WorkflowCheckpoint]) -> list[str]:
    """The codec's canonical hash of each (framework events have no ``__eq__``)."""
    return [_CODEC.encode(cp.to_dict()).payload_hash for cp in checkpoints]


SOURCES: dict[str, Source] = {
    "memory": lambda _: InMemoryCheckpointStorage(),
    "file": lambda path: FileCheckpointStorage(path, allowed_checkpoint_types=list(ALLOWED_TYPES)),
}


@pytest.fixture
async def target(tmp_path: Path) -> AsyncIterator[AgentflowCheckpointStorage]:
    async with SqliteCheckpointer(tmp_path / "agentflow.db", namespace="tenant-1") as store:
        yield flows.storage_on(store, "run-1")


@pytest.mark.parametrize("source_name", sorted(SOURCES))
async def test_a_paused_workflow_resumes_from_its_copy(
    source_name: str, tmp_path: Path, target: AgentflowCheckpointStorage
) -> None:
    source = SOURCES[source_name](tmp_path / "stock")
    await flows.pause(source)  # type: ignore[arg-type]
    originals = await source.list_checkpoints(workflow_name=flows.WORKFLOW_NAME)

    copied = await copy_checkpoints(source, target, workflow_names=[flows.WORKFLOW_NAME])
    assert copied == len(originals) > 1
    again = await copy_checkpoints(source, target, workflow_names=[flows.WORKFLOW_NAME])
    assert again == copied  # every one saved again, with no effect
    stored = await target.list_checkpoints(workflow_name=flows.WORKFLOW_NAME)
    assert _identities(stored) == _identities(lineage_order(originals))
    assert [cp.previous_checkpoint_id for cp in stored[1:]] == [
        cp.checkpoint_id for cp in stored[:-1]
    ]

    outcome = await flows.resume(target, "approve")
    assert outcome == {"outputs": [flows.EXPECTED], "resumed_from": stored[-1].checkpoint_id}


async def test_a_mongodb_storage_run_moves_into_its_session(
    target: AgentflowCheckpointStorage,
) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongodb_uri())
    collection = client["agentflow_tests"][f"migrate-{uuid.uuid4().hex}"]
    options = MongoDBCheckpointStorageOptions(
        tenant_id="tenant-1",
        workflow_name=flows.WORKFLOW_NAME,
        session_id="run-1",
        allowed_checkpoint_types=ALLOWED_TYPES,
    )
    try:
        source = MongoDBCheckpointStorage(options, collection=collection)
        await flows.pause(source)  # type: ignore[arg-type]
        originals = await source.list_checkpoints(workflow_name=flows.WORKFLOW_NAME)
        await copy_checkpoints(source, target, workflow_names=[flows.WORKFLOW_NAME])
        stored = await target.list_checkpoints(workflow_name=flows.WORKFLOW_NAME)
        assert _identities(stored) == _identities(originals)
        outcome = await flows.resume(target, "approve")
        assert outcome["outputs"] == [flows.EXPECTED]
    finally:
        await collection.drop()
        await client.close()


async def test_a_value_the_codec_refuses_stops_the_copy_and_names_it(
    target: AgentflowCheckpointStorage,
) -> None:
    source = InMemoryCheckpointStorage()
    await source.save(
        WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s", state={"o": object()})
    )
    with pytest.raises(CheckpointNotSerializable, match="'wf'"):
        await copy_checkpoints(source, target, workflow_names=["wf"])
    assert await target.list_checkpoint_ids(workflow_name="wf") == []


def test_lineage_order_puts_parents_first_then_time() -> None:
    stamp = "2026-01-01T00:00:00+00:00"
    root = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="s", timestamp=stamp)
    chain = [root]
    for _ in range(5):  # equal timestamps: only the lineage orders them
        chain.append(
            WorkflowCheckpoint(
                workflow_name="wf",
                graph_signature_hash="s",
                previous_checkpoint_id=chain[-1].checkpoint_id,
                timestamp=stamp,
            )
        )
    later = WorkflowCheckpoint(
        workflow_name="wf", graph_signature_hash="s", timestamp="2026-01-02T00:00:00Z"
    )
    shuffled = [*chain, later]
    random.Random(7).shuffle(shuffled)
    assert lineage_order(shuffled) == [*chain, later]
