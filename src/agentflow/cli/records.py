"""The durable side of the command line: leases in ``show``, ``journal`` and ``reconcile``.

They read each thread's durable record from the store that holds its
checkpoints (:attr:`Session.store`).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import orjson
from rich.text import Text

from agentflow.checkpoint.store import Store
from agentflow.cli import render
from agentflow.cli.errors import UsageError
from agentflow.cli.registry import GRAPH_PLACEHOLDER
from agentflow.cli.session import Session
from agentflow.cli.text import inert
from agentflow.durable import (
    OPERATOR_ABORT_CODE,
    CheckpointStatus,
    DurableCheckpoint,
    DurableError,
    OperationKind,
    ReconciliationDecision,
    ReconciliationDecisionKind,
    ReconciliationError,
)
from agentflow.runtime import ThreadNotFound, UnknownOperation, record_decision
from agentflow.runtime.calls import operation_step
from agentflow.runtime.engine import read_checkpoint
from agentflow.runtime.leases import holder_of, iso_ms
from agentflow.runtime.recovery import pending_observations
from agentflow.runtime.section import runtime_of

__all__ = [
    "decision_of",
    "durable_line",
    "journal",
    "lease_of",
    "operations_of",
    "reconcile",
    "reconcile_call",
    "record_of",
]

_D = ReconciliationDecisionKind


async def record_of(store: Store, thread: str) -> DurableCheckpoint | None:
    """``thread``'s durable record; None when it has none (a thread id no record can
    have, or a thread not run since records were kept)."""
    try:
        return await store.load(thread)
    except DurableError as exc:
        if exc.code == "checkpoint_key_invalid":
            return None
        raise


def lease_of(record: DurableCheckpoint | None) -> dict[str, Any] | None:
    """The lease on a run, as ``show`` reports it (None when nobody holds it)."""
    if record is None or record.claim_token is None:
        return None
    return render.lease_view(holder_of(record.claim_token), iso_ms(record.lease_expires_at_ms))


def durable_line(s: Session, record: DurableCheckpoint | None) -> str | None:
    """One line of ``show`` about a run's durable state, when it says something."""
    if record is None:
        return None
    thread = record.checkpoint_key
    if record.status is CheckpointStatus.RECONCILIATION_REQUIRED:
        count = len(pending_observations(record))
        return (
            f"durable  reconciliation_required: {count} call(s) may have acted; "
            f"see {s.command('journal', thread)}"
        )
    if record.terminal_result is not None and record.status is not CheckpointStatus.COMPLETED:
        return f"durable  {record.status.value}: {record.terminal_result.get('message', '')}"
    return None


def operations_of(steps: list[Any], record: DurableCheckpoint | None) -> list[dict[str, Any]]:
    """Every journaled call: those of stored steps, then the journal in flight."""
    rows: list[dict[str, Any]] = []
    for cp in steps:
        for op in runtime_of(cp).get("operations", []):
            rows.append(
                {"step": cp.step, **op, "in_flight": False}
                | {"idempotency_key": op.get("idempotency_key")}
            )
    if record is not None:
        stored = {(row["id"], row["state"], row["attempt"]) for row in rows}
        for entry in (*record.model_call_journal, *record.tool_journal):
            if (entry.operation_id, entry.state.value, entry.attempt) in stored:
                continue
            rows.append(
                {
                    "step": operation_step(entry.operation_id),
                    "id": entry.operation_id,
                    "kind": entry.kind.value,
                    "name": entry.tool_name or entry.kind.value,
                    "state": entry.state.value,
                    "attempt": entry.attempt,
                    "replayed": False,
                    "in_flight": True,
                    "idempotency_key": entry.idempotency_key,
                }
            )
    return rows


async def journal(s: Session) -> int:
    thread = s.args.thread
    steps = [cp async for cp in s.store.history(thread)]
    if not steps:
        raise ThreadNotFound(f"thread {thread!r} not found")
    record = await record_of(s.store, thread)
    operations = operations_of(steps, record)
    pending = [o.to_dict() for o in pending_observations(record)] if record is not None else []
    lease = lease_of(record)
    if s.json:
        s.emit(
            {
                "thread": thread,
                "status": record.status.value if record is not None else None,
                "cycle_index": record.cycle_index if record is not None else None,
                "resume_attempt": record.resume_attempt if record is not None else None,
                "claim": lease,
                "operations": operations,
                "pending": pending,
                "events": [e.to_dict() for e in record.event_outbox] if record else [],
            }
        )
        return 0
    if record is None:
        s.say(thread, ": no durable record yet (it gets one when it is next run)")
    else:
        holder = (
            f"held by {lease['by']} until {lease['until']}" if lease is not None else "unclaimed"
        )
        s.say(
            thread,
            f": {record.status.value}, cycle {record.cycle_index}, "
            f"resume attempt {record.resume_attempt}, {holder}",
        )
    if operations:
        render.print_columns(
            s.console,
            ["step", "operation", "kind", "name", "state", "attempt"],
            [
                [
                    Text(str(op["step"])),
                    Text(inert(op["id"])),
                    Text(op["kind"]),
                    Text(inert(str(op["name"]))),
                    Text(
                        op["state"]
                        + (" (in flight)" if op["in_flight"] else "")
                        + (" (replayed)" if op.get("replayed") else "")
                    ),
                    Text(str(op["attempt"])),
                ]
                for op in operations
            ],
        )
    else:
        s.say("no journaled calls")
    for observation in pending:
        op, attempt = observation["operation_id"], str(observation["attempt"])
        s.say(
            ("ambiguous", "red"),
            f" {op} (attempt {attempt}): {observation['risk']} (idempotency: "
            f"{observation['idempotency_support'] or 'n/a'})",
        )
        decide = ["reconcile", thread, op, "--attempt", attempt, "--decision"]
        s.print_commands(
            [
                s.command(*decide, "replay_success", "--receipt", "<JSON>"),
                s.command(*decide, "record_failure"),
                s.command(*decide, "retry"),
                s.command(*decide, "abort"),
            ],
            heading="decide with one of:",
        )
    return 0


def decision_of(
    kind: OperationKind,
    decision: str,
    *,
    receipt: str | None = None,
    error_code: str | None = None,
    message: str | None = None,
) -> ReconciliationDecision:
    """The decision ``reconcile`` records, from its flags' values (``receipt`` as JSON text)."""
    try:
        chosen = _D(decision)
    except ValueError:
        known = ", ".join(d.value for d in _D)
        raise UsageError(f"the decision must be one of {known}, got {decision!r}") from None
    if chosen is _D.REPLAY_SUCCESS:
        if receipt is None:
            raise UsageError(
                "--decision replay_success needs --receipt JSON (what the call returned)"
            )
        try:
            value = orjson.loads(receipt)
        except orjson.JSONDecodeError as exc:
            raise UsageError(f"--receipt must be JSON: {exc}") from exc
        if kind is OperationKind.MODEL:
            return ReconciliationDecision.replay_response(value)
        return ReconciliationDecision.replay_result(value)
    if receipt is not None:
        raise UsageError("--receipt goes with --decision replay_success only")
    if chosen in (_D.RECORD_FAILURE, _D.ABORT):
        default = (
            "operator_recorded_failure" if chosen is _D.RECORD_FAILURE else OPERATOR_ABORT_CODE
        )
        error = ReconciliationError(
            error_code or default, message or f"{chosen.value} by an operator"
        )
        if chosen is _D.ABORT:
            return ReconciliationDecision.abort(error)
        return ReconciliationDecision.record_failure(error)
    if error_code is not None or message is not None:
        raise UsageError("--error-code and --message go with record_failure or abort only")
    return ReconciliationDecision.defer() if chosen is _D.DEFER else ReconciliationDecision.retry()


async def reconcile_call(
    store: Store,
    thread: str,
    operation: str,
    decision: str,
    *,
    attempt: int,
    receipt: str | None = None,
    error_code: str | None = None,
    message: str | None = None,
    tool: str = "agentflow-reconcile",
) -> tuple[ReconciliationDecision, DurableCheckpoint]:
    """Record an operator's decision on attempt ``attempt`` of ``thread``'s journaled
    call ``operation`` (a decision about another attempt is refused: it was made
    about a call that is settled by now); ``tool`` names what recorded it (the
    owner written is ``tool:host:pid``). Returns the decision and the record as stored."""
    latest = await read_checkpoint(store, thread)
    record = await record_of(store, thread)
    entry = next(
        (
            e
            for e in (*record.model_call_journal, *record.tool_journal)
            if e.operation_id == operation
        )
        if record is not None
        else iter(()),
        None,
    )
    if entry is None:
        raise UnknownOperation(f"thread {thread!r} has no journaled call {operation!r}")
    chosen = decision_of(
        entry.kind, decision, receipt=receipt, error_code=error_code, message=message
    )
    owner = f"{tool}:{socket.gethostname()}:{os.getpid()}"
    stored = await record_decision(
        store, thread, operation, chosen, attempt=attempt, owner=owner, step=latest.step
    )
    return chosen, stored


async def reconcile(s: Session) -> int:
    thread, operation = s.args.thread, s.args.operation
    decision, stored = await reconcile_call(
        s.store,
        thread,
        operation,
        s.args.decision,
        attempt=s.args.attempt,
        receipt=s.args.receipt,
        error_code=s.args.error_code,
        message=s.args.message,
    )
    waiting = [o.to_dict() for o in pending_observations(stored)]
    if s.json:
        s.emit(
            {
                "thread": thread,
                "operation": operation,
                "decision": decision.kind.value,
                "status": stored.status.value,
                "pending": waiting,
            }
        )
        return 0
    s.say(f"recorded {decision.kind.value} for ", operation, " of ", thread)
    if stored.terminal_result is not None:
        s.say(thread, f" ended as {stored.status.value}; the ambiguity stays on record")
    elif waiting:
        s.say(f"{len(waiting)} call(s) still wait for a decision: ", s.command("journal", thread))
    else:
        s.print_commands([await _resume_command(s, thread)])
    return 0


async def _resume_command(s: Session, thread: str) -> str:
    """``agentflow resume THREAD``, with the ``--graph`` it needs: the graph that
    wrote the thread must be registered for a resume (``reconcile`` itself
    needs none), so when this command line has none of that name, the printed
    command carries ``--graph MODULE:ATTR`` and a note saying what goes there."""
    latest = await s.store.get(thread)
    name = runtime_of(latest).get("graph") if latest is not None else None
    if not isinstance(name, str) or s.registry.has(name):
        return s.command("resume", thread)
    return s.command("--graph", GRAPH_PLACEHOLDER, "resume", thread) + (
        f"   # {GRAPH_PLACEHOLDER}: where graph {inert(repr(name))} is defined "
        "(or set AGENTFLOW_GRAPHS)"
    )
