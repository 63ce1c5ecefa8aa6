"""Agent Framework workflows through AgentflowCheckpointStorage, importable by a child process.

The approval workflow is the MongoDB storage suite's own
(``tests.agent_framework_mongodb.af_workflows``): importing it here keeps its
classes' ``module:qualname`` (and the graph's signature) the same in every
process, which the restricted codec and the framework's restore both need.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agent_framework import WorkflowRunState

from agentflow.checkpoint.base import Checkpointer
from agentflow.checkpoint.testing.harness import open_from_recipe
from agentflow.integrations.agent_framework import AgentflowCheckpointStorage
from tests.agent_framework_mongodb import af_request_workflows as requests
from tests.agent_framework_mongodb.af_workflows import ALLOWED_TYPES, WORKFLOW_NAME, build_workflow

__all__ = [
    "EXPECTED",
    "WORKFLOW_NAME",
    "in_child",
    "pause",
    "resume",
    "resume_in_child",
    "storage_on",
]

#: The approval workflow's output when every kind of state survived the restore.
EXPECTED = "budget:600:approve|drafted budget|drafts=1"
Recipe = tuple[str, dict[str, Any]]


def storage_on(checkpointer: Checkpointer, session: str | None) -> AgentflowCheckpointStorage:
    return AgentflowCheckpointStorage(
        checkpointer, session=session, allowed_checkpoint_types=ALLOWED_TYPES
    )


async def pause(storage: AgentflowCheckpointStorage) -> str:
    """Run the approval workflow until it asks; return the request id."""
    result = await build_workflow(storage).run("budget")  # type: ignore[arg-type]
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    (event,) = result.get_request_info_events()
    return str(event.request_id)


async def resume(
    storage: AgentflowCheckpointStorage, answer: str, checkpoint_id: str | None = None
) -> dict[str, Any]:
    """Answer the pending request of the latest checkpoint (or of ``checkpoint_id``)."""
    if checkpoint_id is None:
        latest = await storage.get_latest(workflow_name=WORKFLOW_NAME)
        assert latest is not None, "nothing to resume"
        checkpoint = latest
    else:
        checkpoint = await storage.load(checkpoint_id)
    pending = list(checkpoint.pending_request_info_events)
    result = await build_workflow(storage).run(  # type: ignore[arg-type]
        responses={request_id: answer for request_id in pending},
        checkpoint_id=checkpoint.checkpoint_id,
    )
    return {"outputs": result.get_outputs(), "resumed_from": checkpoint.checkpoint_id}


def resume_in_child(
    recipe: Recipe, namespace: str, session: str | None, answer: str
) -> dict[str, Any]:
    """:func:`resume` from the latest checkpoint, in this (child) process."""

    async def run() -> dict[str, Any]:
        async with open_from_recipe(recipe, namespace=namespace) as checkpointer:
            return await resume(storage_on(checkpointer, session), answer)

    return asyncio.run(run())


async def _in_store(recipe: Recipe, namespace: str, mode: str) -> dict[str, Any]:
    async with open_from_recipe(recipe, namespace=namespace) as checkpointer:
        storage = AgentflowCheckpointStorage(checkpointer)
        if mode == "resume dict":
            return await requests.resume_dict_workflow(storage)
        return await requests.latest_of_refused_workflow(storage)


def in_child(recipe: Recipe, namespace: str, mode: str) -> dict[str, Any]:
    """In this (child) process: ``resume dict`` answers the dict workflow from
    ``get_latest``; ``latest refused`` says what ``get_latest`` gives the refused one."""
    return asyncio.run(_in_store(recipe, namespace, mode))
