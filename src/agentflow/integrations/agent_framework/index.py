"""The namespace's checkpoint id index: id -> (thread, step), one ``get`` away.

The index is the thread ``INDEX_THREAD``; the record at step ``slot(id)``
lists the ids of that slot with their places (one id, unless two ids share 63
bits of BLAKE2b). Every change is a conditional ``put`` on the record's
revision, retried after a re-read when another writer got there first, so
concurrent savers of one slot lose no entry. Entries are written before the
checkpoint they name and checked against it on every read, so an entry left by
a save that died halfway names a step that does not hold its id, and reads as
absent.
"""

from __future__ import annotations

from agentflow.checkpoint.base import Checkpointer
from agentflow.errors import CheckpointConflict, CheckpointCorrupted
from agentflow.integrations.agent_framework.records import (
    INDEX_THREAD,
    Place,
    Stored,
    index_record,
    slot,
    stored_record,
)

__all__ = ["IdIndex"]


class IdIndex:
    """The id index of one checkpointer (and so of one namespace)."""

    def __init__(self, checkpointer: Checkpointer) -> None:
        self.checkpointer = checkpointer

    async def _read(self, step: int) -> Stored | None:
        cp = await self.checkpointer.get(INDEX_THREAD, step)
        if cp is None:
            return None
        stored = stored_record(cp)
        if stored is None or stored.kind != "index":
            raise CheckpointCorrupted(
                f"thread {INDEX_THREAD!r} step {step} is not an Agent Framework id index record"
            )
        return stored

    async def _write(self, step: int, entries: list[tuple[str, Place]], revision: int) -> bool:
        """Store a slot's entries if its revision is still ``revision``."""
        try:
            await self.checkpointer.put(index_record(step, entries), if_revision=revision)
        except CheckpointConflict:
            return False
        return True

    async def find(self, checkpoint_id: str) -> Place | None:
        stored = await self._read(slot(checkpoint_id))
        if stored is not None:
            for cid, place in stored.entries:
                if cid == checkpoint_id:
                    return place
        return None

    async def claim(self, checkpoint_id: str, place: Place) -> Place | None:
        """Enter ``checkpoint_id`` at ``place`` unless it has an entry: then
        return that entry's place and change nothing."""
        step = slot(checkpoint_id)
        if await self._write(step, [(checkpoint_id, place)], 0):  # a new slot: one put
            return None
        while True:
            stored = await self._read(step)
            entries = [] if stored is None else stored.entries
            for cid, found in entries:
                if cid == checkpoint_id:
                    return found
            revision = 0 if stored is None else stored.revision
            if await self._write(step, [*entries, (checkpoint_id, place)], revision):
                return None

    async def move(self, checkpoint_id: str, old: Place, new: Place) -> Place | None:
        """Point the entry of ``checkpoint_id`` from ``old`` to ``new``; when it
        does not name ``old`` any more, change nothing and return what it names
        (``new`` is entered when the entry is gone)."""
        step = slot(checkpoint_id)
        while True:
            stored = await self._read(step)
            entries = [] if stored is None else stored.entries
            current = next((found for cid, found in entries if cid == checkpoint_id), None)
            if current is not None and current != old:
                return current
            kept = [(cid, found) for cid, found in entries if cid != checkpoint_id]
            revision = 0 if stored is None else stored.revision
            if await self._write(step, [*kept, (checkpoint_id, new)], revision):
                return None

    async def remove(self, checkpoint_id: str, place: Place) -> None:
        """Drop the entry of ``checkpoint_id`` if it still names ``place``."""
        step = slot(checkpoint_id)
        while True:
            stored = await self._read(step)
            if stored is None or (checkpoint_id, place) not in stored.entries:
                return
            kept = [(cid, found) for cid, found in stored.entries if cid != checkpoint_id]
            if await self._write(step, kept, stored.revision):
                return
