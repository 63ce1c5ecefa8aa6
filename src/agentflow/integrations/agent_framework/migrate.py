"""Copying checkpoints from another Agent Framework storage into agentflow."""

from __future__ import annotations

from collections.abc import Iterable

from agent_framework import CheckpointStorage, WorkflowCheckpoint

from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import InvalidArgument
from agentflow.integrations.agent_framework.storage import AgentflowCheckpointStorage

__all__ = ["copy_checkpoints", "lineage_order"]


def _instant(timestamp: object) -> int:
    if isinstance(timestamp, str):
        try:
            return parse_instant(timestamp)
        except InvalidArgument:
            pass
    return -1


def lineage_order(checkpoints: Iterable[WorkflowCheckpoint]) -> list[WorkflowCheckpoint]:
    """``checkpoints`` oldest first by timestamp, each after its
    ``previous_checkpoint_id`` when that one is among them.

    A stock storage lists in no stated order (``FileCheckpointStorage`` in
    directory order), and the latest checkpoint of the copy must be the one
    the source saved last.
    """
    by_time = sorted(checkpoints, key=lambda cp: _instant(cp.timestamp))
    by_id = {cp.checkpoint_id: cp for cp in by_time}
    placed: set[str] = set()
    ordered: list[WorkflowCheckpoint] = []
    for cp in by_time:
        chain: list[WorkflowCheckpoint] = []
        seen: set[str] = set()
        node: WorkflowCheckpoint | None = cp
        while node is not None and node.checkpoint_id not in placed | seen:
            chain.append(node)
            seen.add(node.checkpoint_id)
            parent = node.previous_checkpoint_id
            node = by_id.get(parent) if parent is not None else None
        for link in reversed(chain):
            placed.add(link.checkpoint_id)
            ordered.append(link)
    return ordered


async def copy_checkpoints(
    source: CheckpointStorage,
    target: AgentflowCheckpointStorage,
    *,
    workflow_names: Iterable[str],
) -> int:
    """Copy every checkpoint of ``workflow_names`` from ``source`` into
    ``target``; return how many were saved.

    Agent Framework's protocol cannot list workflows, so name them. Ids,
    lineage, timestamps and state are kept, so a workflow paused on
    ``request_info`` resumes from the copy. Copying again is harmless: a
    checkpoint already in ``target`` is saved again with no effect. A value
    that the restricted codec refuses (a class not in the target's
    ``allowed_checkpoint_types``, or one with its own pickle hooks) stops the
    copy with :class:`~agentflow.errors.CheckpointNotSerializable` naming it.
    """
    copied = 0
    for workflow_name in workflow_names:
        listed = await source.list_checkpoints(workflow_name=workflow_name)
        for checkpoint in lineage_order(listed):
            await target.save(checkpoint)
            copied += 1
    return copied
