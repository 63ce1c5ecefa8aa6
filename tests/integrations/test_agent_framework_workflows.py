"""A real Agent Framework workflow through AgentflowCheckpointStorage, on every backend.

The framework only logs a warning when a save fails inside a run, so each
test checks what the store holds, not only that the run finished.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

from agentflow.checkpoint.testing import BackendHarness
from tests.integrations import agent_framework_workflows as flows

NAMESPACE = "tenant-a"


async def test_a_workflow_paused_on_request_info_resumes_in_another_process(
    harness: BackendHarness,
) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        storage = flows.storage_on(checkpointer, "run-1")
        request_id = await flows.pause(storage)
        paused = await storage.get_latest(workflow_name=flows.WORKFLOW_NAME)
        assert paused is not None and list(paused.pending_request_info_events) == [request_id]
        paused_ids = await storage.list_checkpoint_ids(workflow_name=flows.WORKFLOW_NAME)
        (info,) = [
            i
            for i in await checkpointer.list_threads()
            if i.thread == storage.thread_of(flows.WORKFLOW_NAME)
        ]
        assert info.status == "interrupted"

        if harness.multiprocess:
            recipe = pickle.loads(pickle.dumps(harness.recipe))
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                future = pool.submit(flows.resume_in_child, recipe, NAMESPACE, "run-1", "approve")
                outcome = await asyncio.wrap_future(future)
        else:  # one process only (memory): a new storage and a new workflow stand in for it
            outcome = await flows.resume(flows.storage_on(checkpointer, "run-1"), "approve")

        assert outcome == {"outputs": [flows.EXPECTED], "resumed_from": paused.checkpoint_id}
        checkpoints = await storage.list_checkpoints(workflow_name=flows.WORKFLOW_NAME)
        ids = [cp.checkpoint_id for cp in checkpoints]
        assert ids[: len(paused_ids)] == paused_ids and len(ids) > len(paused_ids)
        assert [cp.previous_checkpoint_id for cp in checkpoints[1:]] == ids[:-1]
        assert checkpoints[-1].pending_request_info_events == {}
        latest = await checkpointer.get(storage.thread_of(flows.WORKFLOW_NAME))
        assert latest is not None and latest.done and latest.step == len(ids) - 1


async def test_a_paused_checkpoint_resumes_again_by_id_after_the_run_finished(
    harness: BackendHarness,
) -> None:
    async with harness.open(namespace=NAMESPACE) as checkpointer:
        storage = flows.storage_on(checkpointer, "run-2")
        await flows.pause(storage)
        paused = await storage.get_latest(workflow_name=flows.WORKFLOW_NAME)
        assert paused is not None
        first = await flows.resume(storage, "approve")
        again = await flows.resume(
            flows.storage_on(checkpointer, "run-2"), "approve", paused.checkpoint_id
        )
        assert first["outputs"] == again["outputs"] == [flows.EXPECTED]
        assert again["resumed_from"] == paused.checkpoint_id
        other_session = flows.storage_on(checkpointer, "run-3")
        assert await other_session.get_latest(workflow_name=flows.WORKFLOW_NAME) is None
