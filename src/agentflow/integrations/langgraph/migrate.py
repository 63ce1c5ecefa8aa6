"""Copying existing LangGraph checkpoints from any saver into an AgentflowSaver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from agentflow.integrations.langgraph.saver import AgentflowSaver

__all__ = ["copy_checkpoints"]


async def _listed(
    saver: BaseCheckpointSaver[Any], config: RunnableConfig | None
) -> AsyncIterator[CheckpointTuple]:
    try:
        async for tup in saver.alist(config):
            yield tup
    except NotImplementedError:
        # A synchronous-only saver (SqliteSaver, PostgresSaver): list it off the loop.
        for tup in await asyncio.to_thread(lambda: list(saver.list(config))):
            yield tup


async def copy_checkpoints(
    source: BaseCheckpointSaver[Any],
    target: AgentflowSaver,
    *,
    thread_ids: Iterable[str] | None = None,
) -> int:
    """Copy every checkpoint and pending write of ``thread_ids`` (default: every
    thread ``source.list(None)`` returns) from ``source`` to ``target``; return
    how many checkpoints were copied.

    Ids, parents, metadata and channel versions are kept, so a graph resumes
    on ``target`` where it stood on ``source``. Copying again is harmless: a
    checkpoint id is stored once and a write once per (task, index). Values
    are decoded by ``source``'s serializer (your own store, so trusted) and
    re-checked by ``target``'s allowlist: a type it refuses fails the copy,
    naming the type to allow. A write's ``task_path`` is not in LangGraph's
    listing, so copied writes sort by task id and index.
    """
    configs: list[RunnableConfig | None] = (
        [None]
        if thread_ids is None
        else [{"configurable": {"thread_id": thread_id}} for thread_id in thread_ids]
    )
    copied = 0
    for config in configs:
        async for tup in _listed(source, config):
            configurable = tup.config.get("configurable") or {}
            thread_id = configurable["thread_id"]
            checkpoint_ns = configurable.get("checkpoint_ns", "")
            parent_id = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            put_config: RunnableConfig = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    **({"checkpoint_id": parent_id} if parent_id else {}),
                }
            }
            checkpoint = tup.checkpoint
            stored = await target.aput(
                put_config, checkpoint, tup.metadata, dict(checkpoint["channel_versions"])
            )
            by_task: dict[str, list[tuple[str, Any]]] = {}
            for task_id, channel, value in tup.pending_writes or ():
                by_task.setdefault(task_id, []).append((channel, value))
            for task_id, writes in by_task.items():
                await target.aput_writes(stored, writes, task_id)
            copied += 1
    return copied
