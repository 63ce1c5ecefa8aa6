"""Real Agent Framework workflows paused and resumed through MongoDB.

Seed sentences proven here: "actual workflow pause/resume", "previous_checkpoint_id
is copied unchanged to parent_checkpoint_id", "Restoring a child does not
traverse or rewrite its parent edge", "Every read, write, sort, limit, and
delete includes the discriminator and all raw scope fields", and "A checkpoint
ID alone is never an authorization filter".

A failing save inside a workflow only logs a warning, so every test checks
what MongoDB holds, not just that the run finished.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowRunState

from agent_framework_mongodb import MongoDBCheckpointNotFoundError, MongoDBCheckpointStorage
from agent_framework_mongodb.indexes import CHECKPOINT_KIND
from tests.agent_framework_mongodb.af_workflows import WORKFLOW_NAME, build_workflow
from tests.agent_framework_mongodb.conftest import DATABASE, StorageFactory

REPO = Path(__file__).resolve().parents[2]
EXPECTED = "budget:600:approve|drafted budget|drafts=1"


async def pause(storage: MongoDBCheckpointStorage) -> str:
    """Run until the approval request; return its request ID."""
    result = await build_workflow(storage).run("budget")
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    (event,) = result.get_request_info_events()
    return str(event.request_id)


async def resume_in_fresh_process(
    uri: str, collection: Any, session: str, *extra: str, tenant: str = "tenant-1"
) -> dict[str, Any]:
    """Resume in a new interpreter, so nothing in memory can help the restore."""
    argv = [uri, DATABASE, collection.name, tenant, session, "approve", *extra]
    env = {**os.environ, "PYTHONHASHSEED": "random"}
    completed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tests.agent_framework_mongodb.af_resume", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


async def test_pause_then_resume_from_latest_in_fresh_process(
    make_storage: StorageFactory, collection: Any, mongo_uri: str
) -> None:
    """Pause in this process; a fresh process resumes from get_latest and completes."""
    storage = make_storage()
    request_id = await pause(storage)
    latest = await storage.get_latest(workflow_name=WORKFLOW_NAME)
    assert latest is not None
    assert list(latest.pending_request_info_events) == [request_id]
    paused_ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)

    outcome = await resume_in_fresh_process(mongo_uri, collection, "run-1")

    assert outcome == {"outputs": [EXPECTED], "resumed_from": latest.checkpoint_id}
    after = await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)
    assert after[: len(paused_ids)] == paused_ids and len(after) > len(paused_ids)
    final = await storage.get_latest(workflow_name=WORKFLOW_NAME)
    assert final is not None and final.pending_request_info_events == {}


async def test_resume_from_explicit_checkpoint_id_in_fresh_process(
    make_storage: StorageFactory, collection: Any, mongo_uri: str
) -> None:
    """A fresh process restores a named checkpoint (the paused one), not merely the latest."""
    storage = make_storage(session_id="run-explicit")
    await pause(storage)
    paused = await storage.get_latest(workflow_name=WORKFLOW_NAME)
    assert paused is not None
    first = await resume_in_fresh_process(mongo_uri, collection, "run-explicit")
    assert first["outputs"] == [EXPECTED]

    # The run is finished now, yet the paused checkpoint can still be resumed by ID.
    again = await resume_in_fresh_process(
        mongo_uri, collection, "run-explicit", paused.checkpoint_id
    )
    assert again == {"outputs": [EXPECTED], "resumed_from": paused.checkpoint_id}


async def test_lineage_is_stored_unchanged_and_restore_does_not_rewrite_it(
    make_storage: StorageFactory, collection: Any
) -> None:
    """previous_checkpoint_id is copied to parent_checkpoint_id; sequences follow save order."""
    storage = make_storage(session_id="run-lineage")
    request_id = await pause(storage)
    before = {
        d["checkpoint_id"]: d
        async for d in collection.find({"session_id": "run-lineage", "_kind": CHECKPOINT_KIND})
    }
    await build_workflow(storage).run(
        responses={request_id: "approve"},
        checkpoint_id=(await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME))[-1],
    )
    checkpoints = await storage.list_checkpoints(workflow_name=WORKFLOW_NAME)
    documents = {
        d["checkpoint_id"]: d
        async for d in collection.find({"session_id": "run-lineage", "_kind": CHECKPOINT_KIND})
    }
    assert [c.previous_checkpoint_id for c in checkpoints[1:]] == [
        c.checkpoint_id for c in checkpoints[:-1]
    ]
    for checkpoint in checkpoints:
        assert documents[checkpoint.checkpoint_id]["parent_checkpoint_id"] == (
            checkpoint.previous_checkpoint_id
        )
    for checkpoint_id, document in before.items():  # restoring rewrote nothing
        assert documents[checkpoint_id] == document
    sequences = [documents[c.checkpoint_id]["sequence"] for c in checkpoints]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)


@pytest.mark.parametrize(
    "other_scope",
    [
        {"tenant_id": "tenant-2"},
        {"session_id": "run-2"},
        {"application_id": "application-2"},
        {"application_id": None},
    ],
    ids=["second-tenant", "second-session", "second-application", "no-application"],
)
async def test_other_scopes_see_nothing_of_a_paused_run(
    make_storage: StorageFactory, other_scope: dict[str, Any]
) -> None:
    """Same collection and workflow name, another scope: invisible, even by exact ID."""
    storage = make_storage()
    await pause(storage)
    ids = await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME)
    other = make_storage(**other_scope)

    assert await other.get_latest(workflow_name=WORKFLOW_NAME) is None
    assert await other.list_checkpoints(workflow_name=WORKFLOW_NAME) == []
    assert await other.list_checkpoint_ids(workflow_name=WORKFLOW_NAME) == []
    with pytest.raises(MongoDBCheckpointNotFoundError):
        await other.load(ids[0])
    assert await other.delete(ids[0]) is False
    assert (await other.clear_run()).checkpoints_deleted == 0
    assert await storage.list_checkpoint_ids(workflow_name=WORKFLOW_NAME) == ids
