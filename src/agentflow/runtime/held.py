"""What a lease holds of its run: the record as stored, and what rides the next write.

Two things wait in the lease instead of costing a write of their own:

* **journal moves** (:meth:`HeldRecord.note`): a call's receipt, written with
  the next call's ``started`` entry or the step's commit;
* **lifecycle events** (:meth:`HeldRecord.emit`, see
  :mod:`agentflow.runtime.lifecycle`): queued in the outbox by the next write
  of whatever kind, so an event is stored with (or right after) its cause.

The holder's view of the record (:attr:`HeldRecord.record`: stored record
plus moves noted) is made only when asked for, in O(moves noted), and a
call is looked up in O(1) (:meth:`HeldRecord.find`), so a node's n-th call
costs what its first did.
"""

from __future__ import annotations

from agentflow.checkpoint.plans import queued
from agentflow.durable import DurableCheckpoint, EventOutboxEntry, OperationJournalEntry
from agentflow.durable.enums import OperationKind
from agentflow.durable.run.journals import Journal, journal_of
from agentflow.durable.run.record import evolve

__all__ = ["HeldRecord"]


def _with_entries(
    record: DurableCheckpoint, entries: list[OperationJournalEntry]
) -> DurableCheckpoint:
    """``record`` with ``entries`` in its journals, in order, each in place of the one
    of its call (if any): O(len(entries)), the journals being
    :class:`~agentflow.durable.run.journals.Journal` values."""
    if not entries:
        return record
    journals = {
        OperationKind.MODEL: journal_of(record.model_call_journal),
        OperationKind.TOOL: journal_of(record.tool_journal),
    }
    for entry in entries:
        journal = journals[entry.kind]
        index = journal.position(entry.operation_id)
        journals[entry.kind] = journal.put(len(journal) if index is None else index, entry)
    return evolve(
        record,
        model_call_journal=journals[OperationKind.MODEL],
        tool_journal=journals[OperationKind.TOOL],
    )


def _indexed(record: DurableCheckpoint) -> DurableCheckpoint:
    """``record`` with journals found by id in O(1) (a copy of each once, if needed)."""
    model, tool = record.model_call_journal, record.tool_journal
    if isinstance(model, Journal) and isinstance(tool, Journal):
        return record
    return evolve(record, model_call_journal=journal_of(model), tool_journal=journal_of(tool))


class HeldRecord:
    """The stored record of a claim, the journal moves noted since and the events
    emitted since (see the module docstring)."""

    def __init__(self, record: DurableCheckpoint) -> None:
        #: The record as last stored (the snapshot writes are planned from).
        self._stored = _indexed(record)
        #: Entries settled since, in the order they settled, riding the next write.
        self._pending: list[OperationJournalEntry] = []
        #: The latest of them per call, by (kind, operation id).
        self._noted: dict[tuple[OperationKind, str], OperationJournalEntry] = {}
        #: Lifecycle events emitted since, riding the next write.
        self._events: list[EventOutboxEntry] = []
        #: :attr:`record`, until the next :meth:`note`.
        self._view: DurableCheckpoint | None = self._stored

    @property
    def stored(self) -> DurableCheckpoint:
        """The record as last stored: its claim, cycle, identity and body are the run's
        (journal moves noted since are in :attr:`record` only)."""
        return self._stored

    @property
    def record(self) -> DurableCheckpoint:
        """The holder's view: the stored record with the settled calls not yet written
        (:meth:`note`) in its journal, at the stored revision, so a write planned from
        it (commit, suspend, finalize) carries them. Made when asked for, in
        O(noted) (a step asks once; a call asks :meth:`find`)."""
        view = self._view
        if view is None:
            view = self._view = _with_entries(self._stored, self._pending)
        return view

    def find(self, kind: OperationKind, operation_id: str) -> OperationJournalEntry | None:
        """The latest entry of a call, noted or stored (O(1))."""
        noted = self._noted.get((kind, operation_id))
        return noted if noted is not None else self._journal(kind).find(operation_id)

    def _journal(self, kind: OperationKind) -> Journal:
        journal = self._stored.journal(kind)
        assert isinstance(journal, Journal)  # made so by _indexed
        return journal

    def note(self, entry: OperationJournalEntry) -> None:
        """Keep a journal move that need not be stored before anything else is:
        it rides the next write.

        A call not yet stored at all is kept as its latest entry only (a new
        entry may be written in any state), so each call costs one entry in
        the write that stores it. O(1).
        """
        pending = self._pending
        last = pending[-1] if pending else None
        if (
            last is not None
            and last.operation_id == entry.operation_id
            and last.kind is entry.kind
            and self._journal(entry.kind).position(entry.operation_id) is None
        ):
            pending[-1] = entry
        else:
            pending.append(entry)
        self._noted[entry.kind, entry.operation_id] = entry
        self._view = None

    def emit(self, event: EventOutboxEntry) -> None:
        """Queue a lifecycle event in the outbox of the next write (an id queued or
        stored already is queued once)."""
        if all(queued.event_id != event.event_id for queued in self._events):
            self._events.append(event)

    def with_events(self, snapshot: DurableCheckpoint, *, ending: bool) -> DurableCheckpoint:
        """``snapshot`` (of a write that stores the whole record) with the events
        emitted since in its outbox; ``ending``: a write that ends the cycle, which
        also drops the entries delivered already (the original's commit does)."""
        outbox = snapshot.event_outbox
        if ending:
            outbox = [entry for entry in outbox if entry.state == "pending"]
        if not self._events and outbox is snapshot.event_outbox:
            return snapshot
        return evolve(snapshot, event_outbox=queued(outbox, self._events))

    def adopt(self, record: DurableCheckpoint) -> DurableCheckpoint:
        """Keep ``record`` (what a write returned, everything noted and emitted
        included) as the snapshot of the next write."""
        self._stored = self._view = _indexed(record)
        self._pending.clear()
        self._noted.clear()
        self._events.clear()
        return record

    def _taken(self, written: DurableCheckpoint, noted: int, emitted: int) -> DurableCheckpoint:
        """Adopt ``written``, which stored the first ``noted`` entries noted and the
        first ``emitted`` events; those noted or emitted meanwhile (a parallel node's
        call) still wait for the next write."""
        later, events = self._pending[noted:], self._events[emitted:]
        self.adopt(written)
        for entry in later:
            self.note(entry)
        self._events.extend(events)
        return written
