"""A thread's durable record and events, as ``agentflow copy`` carries them.

The record says what the checkpoints cannot: a run waiting for an operator
after a call that may have acted (``reconciliation_required`` and its
ambiguous journal entry), who holds the run and until when, the receipts of
calls already made. A copy without it would let ``resume`` on the copy run
those calls again, so the record is carried whole, as stored, and first:
before the checkpoints, so a copy killed midway never leaves checkpoints
that a resume would read as a run without a record (a fresh start).

A destination record is left alone when it equals the source's, created when
missing, and replaced whole (:meth:`~agentflow.checkpoint.store.Store.restore`)
when it is an older revision of the same run (the source moved on since the
last copy). Anything else (another run under the id, or a destination that
moved on by itself) is a conflict: the thread is refused unless overwritten.

Events are appended with ``append_once`` under their own ids and digests, so
a copy run again adds only what is missing. Both parts are written through
the destination store, which checks or seals them for its own namespace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from agentflow.checkpoint.rows import identity_of
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.walk import has_record_key
from agentflow.durable.run.events import AcceptedEvent
from agentflow.durable.run.record import DurableCheckpoint

__all__ = [
    "EventIds",
    "RecordPlan",
    "copy_events",
    "describe_record",
    "held_events",
    "load_record",
    "plan_record",
]

#: Events read per replay page.
_PAGE = 500
#: (event id, payload digest) of each event a thread holds.
EventIds = frozenset[tuple[str, str]]
#: What to do with the record: nothing (neither store has one), nothing (equal),
#: create it, restore it over an older revision, or refuse (it differs).
RecordAction = Literal["none", "same", "create", "restore", "conflict"]


async def load_record(store: Store, thread: str) -> DurableCheckpoint | None:
    """The record of ``thread`` in ``store``; None when there is none or the id
    cannot be a record's key (no run of it was ever recorded)."""
    return await store.load(thread) if has_record_key(thread) else None


@dataclass(frozen=True, slots=True)
class RecordPlan:
    """The source's record, the destination's, and what the copy does about them."""

    action: RecordAction
    source: DurableCheckpoint | None
    held: DurableCheckpoint | None

    @classmethod
    def of(cls, source: DurableCheckpoint | None, held: DurableCheckpoint | None) -> RecordPlan:
        if source is None:
            return cls("none" if held is None else "conflict", source, held)
        if held is None:
            return cls("create", source, held)
        if held.to_dict() == source.to_dict():
            return cls("same", source, held)
        if identity_of(held) == identity_of(source) and held.revision < source.revision:
            return cls("restore", source, held)
        return cls("conflict", source, held)

    async def apply(self, destination: Store) -> int:
        """Write the plan into ``destination``; return the writes made (0 or 1)."""
        if self.action == "create":
            assert self.source is not None
            await destination.create(self.source)
        elif self.action == "restore":
            assert self.source is not None and self.held is not None
            await destination.restore(self.held, self.source)
        else:
            return 0
        return 1


async def plan_record(source: Store, destination: Store, thread: str) -> RecordPlan:
    """What copying ``thread``'s record needs: both stores' records, compared."""
    return RecordPlan.of(await load_record(source, thread), await load_record(destination, thread))


async def _events(store: Store, thread: str) -> AsyncIterator[AcceptedEvent]:
    """Every event of ``thread``'s run in ``store``, page by page."""
    after = None
    while True:
        page = await store.replay(thread, after=after, limit=_PAGE)
        for event in page.events:
            yield event
        after = page.next_after
        if after is None:
            return


async def copy_events(source: Store, destination: Store, thread: str) -> tuple[EventIds, int]:
    """Append every event of ``thread``'s run into ``destination`` (each id once,
    ever); return the events read and how many were new there."""
    read: set[tuple[str, str]] = set()
    written = 0
    async for event in _events(source, thread):
        result = await destination.append_once(event.event_id, event.payload_digest, event.event)
        written += result.inserted
        read.add((event.event_id, event.payload_digest))
    return frozenset(read), written


async def held_events(store: Store, thread: str) -> EventIds:
    """The (id, digest) of every event of ``thread``'s run in ``store``."""
    return frozenset([(e.event_id, e.payload_digest) async for e in _events(store, thread)])


def describe_record(record: DurableCheckpoint | None) -> str:
    """A record in a mismatch message: revision and status, never its content."""
    if record is None:
        return "no record"
    return f"record revision {record.revision} ({record.status.value})"
