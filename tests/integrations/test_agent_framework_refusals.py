"""Issue 21 through AgentflowCheckpointStorage, on every backend, with real workflows.

A workflow that asks with a plain dict (its paused checkpoint holds the class
``dict`` and type hints) pauses, is stored and resumes from ``get_latest`` in
another process. A workflow whose paused checkpoint is refused is reported
paused by Agent Framework, which only warns; the user finds out anyway: an
ERROR line with the code, a counter, and ``get_latest`` raising
``CheckpointStale`` in every process until a later save succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from agentflow.checkpoint.base import Checkpointer
from agentflow.checkpoint.testing import BackendHarness
from agentflow.integrations.agent_framework import (
    REFUSED_SAVES,
    AgentflowCheckpointStorage,
    CheckpointNotFound,
    CheckpointStale,
)
from tests.agent_framework_mongodb import af_request_workflows as requests
from tests.integrations import agent_framework_workflows as flows

NAMESPACE = "tenant-requests"


async def _elsewhere(
    harness: BackendHarness, checkpointer: Checkpointer, mode: str
) -> dict[str, Any]:
    """``flows.in_child`` in a spawned process, or (memory) with a new storage here."""
    if not harness.multiprocess:
        storage = AgentflowCheckpointStorage(checkpointer)
        if mode == "resume dict":
            return await requests.resume_dict_workflow(storage)
        return await requests.latest_of_refused_workflow(storage)
    recipe = pickle.loads(pickle.dumps(harness.recipe))
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return await asyncio.wrap_future(pool.submit(flows.in_child, recipe, NAMESPACE, mode))


async def test_a_request_with_a_plain_dict_resumes_from_latest_in_another_process(
    harness: BackendHarness,
) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        storage = AgentflowCheckpointStorage(checkpointer)
        request_id = await requests.pause(requests.dict_workflow(storage), "release?")
        latest = await storage.get_latest(workflow_name=requests.DICT_WORKFLOW)
        assert latest is not None and list(latest.pending_request_info_events) == [request_id]
        outcome = await _elsewhere(harness, checkpointer, "resume dict")
    assert outcome == {"outputs": [requests.EXPECTED], "resumed_from": latest.checkpoint_id}


async def test_a_refused_save_inside_a_workflow_is_seen_everywhere(
    harness: BackendHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="agentflow.integrations.agent_framework")
    before = REFUSED_SAVES["checkpoint_not_serializable"]
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        storage = AgentflowCheckpointStorage(checkpointer)
        await requests.pause(requests.refused_workflow(storage), "budget")  # "paused", per AF

        (error,) = [r for r in caplog.records if "save refused" in r.getMessage()]
        assert "(checkpoint_not_serializable)" in error.getMessage()
        assert "UnlistedRequest" in error.getMessage()  # names what to list
        assert REFUSED_SAVES["checkpoint_not_serializable"] == before + 1
        with pytest.raises(CheckpointStale) as stale:
            await storage.get_latest(workflow_name=requests.REFUSED_WORKFLOW)
        assert isinstance(stale.value, WorkflowCheckpointException)
        assert stale.value.refused_code == "checkpoint_not_serializable"
        assert stale.value.latest is None or stale.value.latest.pending_request_info_events == {}
        elsewhere = await _elsewhere(harness, checkpointer, "latest refused")
        assert elsewhere["error"] == "CheckpointStale" and elsewhere["code"] == "checkpoint_stale"

        later = WorkflowCheckpoint(
            workflow_name=requests.REFUSED_WORKFLOW, graph_signature_hash="g"
        )
        await storage.save(later)
        latest = await AgentflowCheckpointStorage(checkpointer).get_latest(
            workflow_name=requests.REFUSED_WORKFLOW
        )
        assert latest is not None and latest.checkpoint_id == later.checkpoint_id


async def test_a_missing_checkpoint_reads_as_agent_frameworks_own(
    harness: BackendHarness,
) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        with pytest.raises(WorkflowCheckpointException, match=r"^No checkpoint found with ID n-1$"):
            await AgentflowCheckpointStorage(checkpointer).load("n-1")
        with pytest.raises(CheckpointNotFound) as missing:
            await AgentflowCheckpointStorage(checkpointer).load("n-2")
    assert missing.value.checkpoint_id == "n-2" and missing.value.code == "checkpoint_not_found"
