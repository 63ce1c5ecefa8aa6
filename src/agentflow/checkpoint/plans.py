"""The compare-and-set rules of every store operation, as pure functions.

Each operation is planned here from the caller's snapshot into a
:class:`Write`: a :class:`Guard` on the stored head and the new head, body
and journal change to apply if the guard holds. A backend applies a write
as one conditional statement (an ``UPDATE ... WHERE``, one Lua script, one
``find_one_and_update``) and, when it matched nothing, reads the head again
and raises :func:`refusal` of it. Because every change of stored content
bumps the revision, a guard on the revision makes the caller's snapshot the
stored state, so planning needs no read.

Fencing: writes of a claim holder are guarded on its claim token (and the
claimed cycle). A recovery claim replaces the token, so every later write of
the old holder is refused with :class:`LeaseLost`, and so is its lease
renewal; a holder renews before each external call, so a holder that lost
its lease never starts another one. A lease that lapsed but was not yet
taken over still fences nothing: the holder's receipts remain welcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentflow.checkpoint.rows import RunHead, encode_body, encode_entry, head_of, identity_of
from agentflow.durable.enums import CheckpointStatus, OperationKind, OperationState
from agentflow.durable.errors import (
    CheckpointNotFound,
    ClaimActive,
    CycleConflict,
    DurableConflict,
    DurableError,
    LeaseLost,
    RevisionConflict,
    TerminalImmutable,
)
from agentflow.durable.run.events import EventOutboxEntry
from agentflow.durable.run.journal import ALLOWED_TRANSITIONS, OperationJournalEntry
from agentflow.durable.run.journals import journal_of
from agentflow.durable.run.record import DurableCheckpoint, evolve
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER
from agentflow.durable.wire.validators import is_blank

__all__ = [
    "Guard",
    "JournalPut",
    "JournalReplace",
    "Write",
    "next_revision",
    "plan_acknowledge",
    "plan_commit",
    "plan_finalize",
    "plan_finalize_claimed",
    "plan_progress",
    "plan_record_operation",
    "plan_record_operations",
    "plan_restore",
    "plan_suspend",
    "queued",
    "refusal",
]

_CLAIM = "checkpoint_claim_invalid"
#: The states a new entry may be written in: planned, or the moves from it written at once
#: (started; or settled: a call whose outcome is written with its start).
_FIRST_STATES = frozenset(OperationState)


@dataclass(frozen=True, slots=True)
class Guard:
    """What the stored head must equal for a write to apply (every field that is set).

    ``claim_token`` is compared always (``None`` means the row must be
    unclaimed); ``claimed_cycle`` only when a token is required.
    """

    revision: int
    claim_token: str | None
    terminal: bool
    identity: str
    claimed_cycle: int | None = None
    resume_attempt: int | None = None
    terminal_acknowledged: bool | None = None

    def holds(self, head: RunHead) -> bool:
        return (
            head.revision == self.revision
            and head.claim_token == self.claim_token
            and (self.claim_token is None or head.claimed_cycle == self.claimed_cycle)
            and head.terminal == self.terminal
            and head.identity == self.identity
            and (self.resume_attempt is None or head.resume_attempt == self.resume_attempt)
            and (
                self.terminal_acknowledged is None
                or head.terminal_acknowledged == self.terminal_acknowledged
            )
        )


@dataclass(frozen=True, slots=True)
class JournalReplace:
    """Replace both journals with these entries."""

    model: tuple[bytes, ...]
    tool: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class JournalPut:
    """Write one entry at ``index`` of one journal (``index == len`` appends).

    A write carries a tuple of them, applied in order: a receipt and the next
    call's ``started`` entry ride one write.
    """

    kind: OperationKind
    index: int
    entry: bytes


@dataclass(frozen=True, slots=True)
class Write:
    """One conditional write and the record it leaves behind.

    Apply ``head`` (every field; but when ``keep_lease`` the stored lease
    stays), ``body`` unless None, and ``journal`` unless None (a tuple of
    :class:`JournalPut` is applied in order), iff ``guard`` holds.
    ``record`` is the stored record afterwards; when ``keep_lease`` its
    lease must be set from the store's (a renewal may have moved it).
    """

    key: str
    guard: Guard
    head: RunHead
    keep_lease: bool
    body: bytes | None
    journal: JournalReplace | tuple[JournalPut, ...] | None
    record: DurableCheckpoint


def next_revision(revision: int) -> int:
    if revision >= MAX_WIRE_INTEGER:
        raise DurableError("checkpoint_revision_overflow", "revision overflow")
    return revision + 1


def _claimed_guard(snapshot: DurableCheckpoint, claim_token: str) -> Guard:
    if not isinstance(claim_token, str) or is_blank(claim_token):
        raise DurableError(_CLAIM, "claim_token must be non-empty")
    if snapshot.claimed_cycle is None:
        raise DurableError(_CLAIM, "a claimed write needs the snapshot of a claimed record")
    return Guard(
        revision=snapshot.revision,
        claim_token=claim_token,
        terminal=False,
        identity=identity_of(snapshot),
        claimed_cycle=snapshot.claimed_cycle,
        resume_attempt=snapshot.resume_attempt,
        terminal_acknowledged=snapshot.terminal_acknowledged,
    )


def _journals(record: DurableCheckpoint) -> JournalReplace:
    return JournalReplace(
        tuple(encode_entry(entry) for entry in record.model_call_journal),
        tuple(encode_entry(entry) for entry in record.tool_journal),
    )


def _write(guard: Guard, record: DurableCheckpoint, *, keep_lease: bool) -> Write:
    record.validate()
    return Write(
        key=record.checkpoint_key,
        guard=guard,
        head=head_of(record),
        keep_lease=keep_lease,
        body=encode_body(record),
        journal=_journals(record),
        record=record,
    )


def plan_progress(snapshot: DurableCheckpoint, claim_token: str) -> Write:
    """Replace the claimed record's content; claim and lease stay as stored."""
    guard = _claimed_guard(snapshot, claim_token)
    record = evolve(snapshot, claim_token=claim_token, revision=next_revision(snapshot.revision))
    return _write(guard, record, keep_lease=True)


def plan_suspend(snapshot: DurableCheckpoint, claim_token: str) -> Write:
    """Release the claim of a run left with an ambiguous operation, for reconciliation."""
    guard = _claimed_guard(snapshot, claim_token)
    if not snapshot.has_ambiguous_operation():
        raise DurableError("checkpoint_status_invalid", "suspend requires an ambiguous operation")
    record = evolve(
        snapshot,
        status=CheckpointStatus.RECONCILIATION_REQUIRED,
        claim_token=None,
        claimed_cycle=None,
        lease_expires_at_ms=None,
        revision=next_revision(snapshot.revision),
    )
    return _write(guard, record, keep_lease=False)


def _refuse_unsettled(snapshot: DurableCheckpoint, what: str) -> None:
    """Refuse to end a run whose journal holds a call that may have acted (``started``
    or ``ambiguous``): finalizing would wipe the only record of it (beyond the
    original, which finalizes what it is given; an operator's abort keeps it)."""
    for entry in (*snapshot.model_call_journal, *snapshot.tool_journal):
        if entry.state in (OperationState.STARTED, OperationState.AMBIGUOUS):
            raise DurableError(
                "checkpoint_journal_unsettled",
                f"{what} would clear call {entry.operation_id!r}, which is "
                f"{entry.state.value}: settle it (suspend for reconciliation) first",
            )


def plan_commit(snapshot: DurableCheckpoint, claim_token: str) -> Write:
    """Commit the claimed cycle: it becomes ``cycle_index``; journals and claim clear."""
    guard = _claimed_guard(snapshot, claim_token)
    if snapshot.cycle_index != snapshot.claimed_cycle:
        raise CycleConflict("commit must set cycle_index to the claimed cycle")
    record = evolve(
        snapshot,
        model_call_journal=[],
        tool_journal=[],
        claim_token=None,
        claimed_cycle=None,
        lease_expires_at_ms=None,
        revision=next_revision(snapshot.revision),
    )
    return _write(guard, record, keep_lease=False)


def _terminal(snapshot: DurableCheckpoint) -> DurableCheckpoint:
    if snapshot.terminal_result is None:
        raise DurableError(
            "checkpoint_terminal_result_required", "finalize requires terminal_result"
        )
    if not snapshot.status.is_terminal:
        raise DurableError("checkpoint_status_invalid", "finalize requires a terminal status")
    keep = snapshot.is_operator_abort_terminal()
    if not keep:  # an operator's abort keeps the ambiguity on record; nothing else may end it
        _refuse_unsettled(snapshot, "a finalize")
    return evolve(
        snapshot,
        model_call_journal=snapshot.model_call_journal if keep else [],
        tool_journal=snapshot.tool_journal if keep else [],
        claim_token=None,
        claimed_cycle=None,
        lease_expires_at_ms=None,
        revision=next_revision(snapshot.revision),
    )


def plan_finalize_claimed(snapshot: DurableCheckpoint, claim_token: str) -> Write:
    """Write the terminal result under the caller's claim and clear the claim."""
    guard = _claimed_guard(snapshot, claim_token)
    return _write(guard, _terminal(snapshot), keep_lease=False)


def plan_finalize(snapshot: DurableCheckpoint) -> Write:
    """Write the terminal result of an unclaimed run (an operator's abort, say)."""
    guard = Guard(
        revision=snapshot.revision,
        claim_token=None,
        terminal=False,
        identity=identity_of(snapshot),
        resume_attempt=snapshot.resume_attempt,
        terminal_acknowledged=snapshot.terminal_acknowledged,
    )
    if snapshot.claim_token is not None:
        raise ClaimActive("an unclaimed finalize needs the snapshot of an unclaimed record")
    return _write(guard, _terminal(snapshot), keep_lease=False)


def _check_successor(previous: OperationJournalEntry | None, entry: OperationJournalEntry) -> None:
    if previous is None:
        if entry.attempt != 1 or entry.state not in _FIRST_STATES:
            raise DurableError(
                "operation_transition_invalid",
                f"a new journal entry starts at attempt 1,"
                f" not at attempt {entry.attempt} as {entry.state.value}",
            )
        return
    if not previous.same_call(entry):
        raise DurableError(
            "checkpoint_journal_integrity_mismatch", "the entry does not journal the same call"
        )
    retry = previous.state is OperationState.AMBIGUOUS and entry.state is OperationState.PLANNED
    if (previous.state, entry.state) not in ALLOWED_TRANSITIONS or entry.attempt != (
        previous.attempt + 1 if retry else previous.attempt
    ):
        raise DurableError(
            "operation_transition_invalid",
            f"cannot transition {previous.state.value} to {entry.state.value}"
            f" (attempt {previous.attempt} to {entry.attempt})",
        )


def plan_record_operation(
    snapshot: DurableCheckpoint, entry: OperationJournalEntry, claim_token: str
) -> Write:
    """Write one journal entry: a new one (planned, or straight to a later state) or a move.

    The entry is matched by ``(kind, operation_id)`` in the snapshot; the move
    from the snapshot's entry must be legal. Only the entry and the head change.
    """
    return plan_record_operations(snapshot, (entry,), claim_token)


def plan_record_operations(
    snapshot: DurableCheckpoint,
    entries: Sequence[OperationJournalEntry],
    claim_token: str,
    events: Sequence[EventOutboxEntry] = (),
) -> Write:
    """Write several journal entries as one write, each as :func:`plan_record_operation` would.

    Each entry is matched in the snapshot as changed by the entries before it,
    so a call's receipt and the next call's ``started`` entry (or several
    receipts) ride one write; an empty ``entries`` only moves the revision.
    ``events`` are queued in the outbox by the same write (:func:`queued`), which
    then writes the body too.
    O(len(entries)) whatever the journals' lengths: they are
    :class:`~agentflow.durable.run.journals.Journal` values (a snapshot's
    plain lists become one once), found by id and written without a copy.
    """
    guard = _claimed_guard(snapshot, claim_token)
    cycle = snapshot.active_cycle()
    journals = {
        OperationKind.MODEL: journal_of(snapshot.model_call_journal),
        OperationKind.TOOL: journal_of(snapshot.tool_journal),
    }
    puts: list[JournalPut] = []
    for entry in entries:
        entry.validate()
        if entry.cycle_index != cycle:
            raise DurableError(
                "checkpoint_journal_cycle_invalid",
                "journal cycle_index must equal the active cycle",
            )
        journal = journals[entry.kind]
        index = journal.position(entry.operation_id)
        _check_successor(None if index is None else journal[index], entry)
        index = len(journal) if index is None else index
        journals[entry.kind] = journal.put(index, entry)
        puts.append(JournalPut(entry.kind, index, encode_entry(entry)))
    record = evolve(
        snapshot,
        claim_token=claim_token,
        revision=next_revision(snapshot.revision),
        model_call_journal=journals[OperationKind.MODEL],
        tool_journal=journals[OperationKind.TOOL],
        event_outbox=queued(snapshot.event_outbox, events),
    )
    return Write(
        key=record.checkpoint_key,
        guard=guard,
        head=head_of(record, identity=guard.identity),  # a journal write keeps the identity
        keep_lease=True,
        body=encode_body(record) if events else None,
        journal=tuple(puts),
        record=record,
    )


def queued(
    outbox: Sequence[EventOutboxEntry], events: Sequence[EventOutboxEntry]
) -> list[EventOutboxEntry]:
    """``outbox`` with ``events`` (pending entries) after it, each checked; an id
    the outbox holds already is queued once (the same lifecycle fact, emitted again:
    the first stands)."""
    if not events:
        return list(outbox)
    held = {entry.event_id for entry in outbox}
    added = []
    for event in events:
        event.verify_payload()
        if event.state != "pending":
            raise DurableError("checkpoint_event_outbox_invalid", "a queued event is pending")
        if event.event_id not in held:
            held.add(event.event_id)
            added.append(event)
    return [*outbox, *added]


def plan_acknowledge(snapshot: DurableCheckpoint) -> Write:
    """Mark a terminal record acknowledged (kept until an explicit delete)."""
    if snapshot.terminal_result is None or snapshot.terminal_acknowledged:
        raise DurableError(
            "checkpoint_status_invalid", "only an unacknowledged terminal can be acknowledged"
        )
    guard = Guard(
        revision=snapshot.revision,
        claim_token=None,
        terminal=True,
        identity=identity_of(snapshot),
        terminal_acknowledged=False,
    )
    record = evolve(snapshot, terminal_acknowledged=True, revision=next_revision(snapshot.revision))
    return Write(record.checkpoint_key, guard, head_of(record), False, None, None, record)


def plan_restore(stored: DurableCheckpoint, record: DurableCheckpoint) -> Write:
    """Replace the record stored as ``stored`` with ``record``, whole (its head included).

    ``record`` keeps its own revision, which must be above the stored one; the
    guard is the stored head as the caller read it, so a write in between wins.
    """
    if record.checkpoint_key != stored.checkpoint_key:
        raise DurableError("checkpoint_key_invalid", "a record is restored under its own key")
    if record.revision <= stored.revision:
        raise DurableError(
            "checkpoint_revision_invalid",
            f"a restored record's revision must be above the stored {stored.revision}",
        )
    guard = Guard(
        revision=stored.revision,
        claim_token=stored.claim_token,
        terminal=stored.terminal_result is not None,
        identity=identity_of(stored),
        claimed_cycle=stored.claimed_cycle,
        resume_attempt=stored.resume_attempt,
        terminal_acknowledged=stored.terminal_acknowledged,
    )
    return _write(guard, record, keep_lease=False)


def refusal(head: RunHead | None, guard: Guard) -> DurableError:
    """The typed error for a guard that did not hold against ``head`` (None: no row)."""
    if head is None:
        return CheckpointNotFound("no record under this key")
    if guard.claim_token is not None:
        if head.claim_token != guard.claim_token or head.claimed_cycle != guard.claimed_cycle:
            return LeaseLost("the claim was replaced or released")
    else:
        if head.terminal and not guard.terminal:
            return TerminalImmutable("the record is terminal")
        if head.claim_token is not None:
            return ClaimActive("the record is claimed")
    if head.revision != guard.revision:
        return RevisionConflict(f"expected revision {guard.revision}, stored {head.revision}")
    if head.identity != guard.identity:
        return DurableError(
            "checkpoint_definition_mismatch",
            "the snapshot's run identity differs from the stored one",
        )
    return DurableConflict("the stored record is not in the state this write requires")
