"""``get_delta_channel_history`` for LangGraph's DeltaChannel, over the records.

The contract is LangGraph's default (walk the parent chain; per channel,
collect the writes stored at each ancestor until one stores a value, the seed).
The ancestors are one newest-first history read below the target, in the
backend's pages, which passes over the checkpoints that are not on the chain
(a fork's siblings); only the requested channels' writes and seeds are decoded.
So the walk to a seed 100 updates back costs a few round trips, not two
``get`` calls per ancestor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import DeltaChannelHistory, PendingWrite

from agentflow.integrations.langgraph.store import RecordStore

__all__ = ["delta_channel_history"]


async def delta_channel_history(
    store: RecordStore, thread: str, checkpoint_id: str | None, channels: Sequence[str]
) -> Mapping[str, DeltaChannelHistory]:
    if not channels:
        return {}
    target = await (
        store.latest(thread) if checkpoint_id is None else store.by_id(thread, checkpoint_id)
    )
    collected: dict[str, list[PendingWrite]] = {ch: [] for ch in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    parent_id = None if target is None else target[0].fields.get("parent_id")
    values = store.codec.values
    if target is not None and parent_id is not None:
        ancestors = store.newest_pairs(thread, before=target[0].step)
        try:
            async for cp, writes in ancestors:
                if cp.checkpoint_id != parent_id:
                    continue  # not on the chain: a sibling of a fork
                for write in reversed(store.codec.pending_writes(writes, remaining)):
                    collected[write[1]].append(write)
                packed = cp.fields.get("values_packed") or {}
                for ch in list(remaining):
                    if ch in cp.source.state:
                        seeds[ch] = cp.source.state[ch]
                    elif ch in packed:
                        seeds[ch] = values.unpack(packed[ch])
                    else:
                        continue
                    remaining.discard(ch)
                parent_id = cp.fields.get("parent_id")
                if parent_id is None or not remaining:
                    break
        finally:
            await ancestors.aclose()
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        result[ch] = entry
    return result
