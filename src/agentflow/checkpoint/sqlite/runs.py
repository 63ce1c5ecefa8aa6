"""The records of the SQLite store: a head row, a body row, and one row per journal entry.

Each operation is one job in the transaction of the file's writer thread
(statements in :mod:`~agentflow.checkpoint.sqlite.sql`): the guard is decided
by the head's conditional ``UPDATE`` under SQLite's write lock, across threads
and processes, and the journal rows and the thread summary's imposed status
are written after it in the same transaction, only once it applied. A write
that matched nothing is answered from the head re-read in that transaction,
as a result, never as an exception (which would roll back the whole group).

Reads check every column before trusting it: a damaged row raises
:class:`~agentflow.durable.errors.DurableCorrupted`, never reads as missing
or as other data. Leases run on this machine's wall clock, read inside the
transaction: every process on one file agrees on who holds a run as long as
their clocks agree (one machine, or synchronized clocks).
"""

from __future__ import annotations

import abc
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Final

from agentflow.checkpoint.claims import (
    check_claim_request,
    claim_refusal,
    claimed_head,
    renew_refusal,
)
from agentflow.checkpoint.plans import JournalPut, JournalReplace, Write, refusal
from agentflow.checkpoint.rows import RunHead, RunRow, summary_of
from agentflow.checkpoint.runs import RunsBase
from agentflow.checkpoint.sqlite.connection import SqliteConnection
from agentflow.checkpoint.sqlite.sql import (
    CLAIM,
    DELETE_JOURNAL,
    DELETE_RUN,
    HEAD,
    HEAD_COLUMNS,
    INSERT_RUN,
    JOURNAL_PART,
    LEASE,
    LIST_RUNS,
    LIST_RUNS_STATUS,
    LOAD,
    PUT_ENTRY,
    REFUSED,
    RENEW,
    SET_RUN_STATUS,
    TRIM_JOURNAL,
    write_statement,
)
from agentflow.checkpoint.store_base import run_thread_status
from agentflow.checkpoint.timestamps import wall_clock_ms
from agentflow.durable.enums import CheckpointStatus, ClaimMode, OperationKind
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    ClaimActive,
    DurableConflict,
    DurableCorrupted,
    DurableError,
)
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER
from agentflow.durable.wire.validators import validate_checkpoint_key

__all__ = ["SqliteRuns", "apply_write", "delete_run", "refused"]

_ROW_INVALID: Final = "checkpoint_row_invalid"
_STATUSES: Final = frozenset(status.value for status in CheckpointStatus)
_KINDS: Final = frozenset(kind.value for kind in OperationKind)
_WIDTH: Final = len(HEAD_COLUMNS)


def _count(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_WIRE_INTEGER


def _flag(value: object) -> bool:
    return type(value) is int and value in (0, 1)


def head_from(key: str, values: Sequence[Any]) -> RunHead:
    """The head stored in ``values`` (the columns of ``HEAD_COLUMNS``, in order)."""
    revision, status, cycle, attempt, token, claimed, lease, terminal, acked, ambiguous, ident = (
        values
    )
    if (
        all(_count(value) for value in (revision, cycle, attempt))
        and all(value is None or _count(value) for value in (claimed, lease))
        and all(_flag(value) for value in (terminal, acked, ambiguous))
        and (token is None or isinstance(token, str))
        and isinstance(ident, str)
        and status in _STATUSES
    ):
        flags = (bool(terminal), bool(acked), bool(ambiguous))
        status = CheckpointStatus(status)
        return RunHead(revision, status, cycle, attempt, token, claimed, lease, *flags, ident)
    raise DurableCorrupted(_ROW_INVALID, f"stored head of {key!r} has damaged columns")


def _journals(key: str, rows: Sequence[Any]) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """The model and tool journals in ``(kind, idx, entry)`` rows sorted by kind and
    index: each kind's indexes must run 0, 1, 2, ... and every entry be bytes."""
    journals: dict[str, list[bytes]] = {kind: [] for kind in _KINDS}
    for kind, index, entry in rows:
        entries = journals.get(kind)
        if entries is None or index != len(entries) or not isinstance(entry, bytes):
            raise DurableCorrupted(_ROW_INVALID, f"stored journal of {key!r} has a damaged entry")
        entries.append(entry)
    return tuple(journals[OperationKind.MODEL]), tuple(journals[OperationKind.TOOL])


def _loaded(key: str, rows: list[Any]) -> RunRow | None:
    """The row in what ``LOAD`` read (head row, body row, journal rows), or None for none."""
    if not rows:
        return None
    if [row[0] for row in rows[:2]] != [0, 1] or any(row[0] != JOURNAL_PART for row in rows[2:]):
        raise DurableCorrupted(_ROW_INVALID, f"stored record {key!r} lacks its head or body row")
    body = rows[1][-1]
    if not isinstance(body, bytes):
        raise DurableCorrupted(_ROW_INVALID, f"stored body of {key!r} is missing or not bytes")
    journal = [(row[1], row[2], row[-1]) for row in rows[2:]]
    return RunRow(key, head_from(key, rows[0][3 : 3 + _WIDTH]), body, *_journals(key, journal))


def _guard_params(namespace: str, write: Write) -> dict[str, Any]:
    guard = write.guard
    return {
        "namespace": namespace,
        "key": write.key,
        **{name: getattr(write.head, name) for name in HEAD_COLUMNS},
        "body": write.body,
        "g_revision": guard.revision,
        "g_claim_token": guard.claim_token,
        "g_terminal": int(guard.terminal),
        "g_identity": guard.identity,
        "g_claimed_cycle": guard.claimed_cycle,
        "g_resume_attempt": guard.resume_attempt,
        "g_terminal_acknowledged": (
            None if guard.terminal_acknowledged is None else int(guard.terminal_acknowledged)
        ),
    }


def _set_run_status(
    conn: sqlite3.Connection, run: dict[str, Any], status: CheckpointStatus | None
) -> None:
    """Set the status the record imposes on its thread's summary (None: no record)."""
    imposed = None if status is None else run_thread_status(status)
    conn.execute(SET_RUN_STATUS, {**run, "run_status": imposed})


def _put_journal(
    conn: sqlite3.Connection,
    run: dict[str, Any],
    journal: JournalReplace | tuple[JournalPut, ...] | None,
) -> None:
    """Write a journal change: a replaced journal's entries (the unchanged ones are
    left as they are) with the rest trimmed, or each put at its place."""
    if isinstance(journal, JournalReplace):
        for kind, entries in (
            (OperationKind.MODEL, journal.model),
            (OperationKind.TOOL, journal.tool),
        ):
            conn.execute(TRIM_JOURNAL, {**run, "kind": kind.value, "idx": len(entries)})
            conn.executemany(
                PUT_ENTRY,
                [{**run, "kind": kind.value, "idx": i, "entry": e} for i, e in enumerate(entries)],
            )
    elif journal:
        conn.executemany(
            PUT_ENTRY,
            [{**run, "kind": p.kind.value, "idx": p.index, "entry": p.entry} for p in journal],
        )


def apply_write(conn: sqlite3.Connection, namespace: str, write: Write) -> tuple[Any, Any]:
    """Apply ``write`` inside the writer's transaction: ``(lease, None)`` when it
    applied, ``(None, refused)`` (the :data:`~agentflow.checkpoint.sqlite.sql.REFUSED`
    rows) when its guard did not hold, in which case nothing was written."""
    guard = write.guard
    statement = write_statement(
        body=write.body is not None,
        keep_lease=write.keep_lease,
        claimed_cycle=guard.claim_token is not None,
        resume_attempt=guard.resume_attempt is not None,
        terminal_acknowledged=guard.terminal_acknowledged is not None,
        keep_claim=write.head.claim_token == guard.claim_token,
    )
    params = _guard_params(namespace, write)
    changed = conn.execute(statement, params).fetchall()
    run = {"namespace": namespace, "key": write.key}
    if not changed:
        return None, conn.execute(REFUSED, run).fetchall()
    _put_journal(conn, run, write.journal)
    _set_run_status(conn, run, write.head.status)
    return next(lease for part, lease in changed if part == 0), None


def refused(write: Write, found: list[Any]) -> DurableError:
    """Why ``write`` matched nothing, from the head re-read in its transaction."""
    if not found:
        return refusal(None, write.guard)
    *columns, has_body = found[0]
    head = head_from(write.key, columns)
    if write.guard.holds(head) and not has_body:
        return DurableCorrupted(_ROW_INVALID, f"stored record {write.key!r} has no body row")
    return refusal(head, write.guard)


def delete_run(conn: sqlite3.Connection, run: dict[str, Any], force: bool) -> bool | None:
    """Delete a record and its journal in the writer's transaction: whether any row
    was deleted, or None (nothing deleted) when its lease is live on the clock read
    here and ``force`` is false."""
    lease = conn.execute(LEASE, run).fetchall()
    if not force and lease and lease[0][0] is not None and lease[0][0] > wall_clock_ms():
        return None
    removed: int = conn.execute(DELETE_RUN, run).rowcount
    removed += conn.execute(DELETE_JOURNAL, run).rowcount
    _set_run_status(conn, run, None)
    return removed > 0


class SqliteRuns(SqliteConnection, RunsBase, abc.ABC):
    """The record part of :class:`~agentflow.checkpoint.sqlite.SqliteCheckpointer`."""

    def _run(self, key: str) -> dict[str, Any]:
        return {"namespace": self._namespace, "key": key}

    def _inserted(self, checkpoint: DurableCheckpoint) -> Callable[[sqlite3.Connection], bool]:
        """The job that inserts ``checkpoint`` unless a record has its key: True if it did."""
        row = self._parts.encode_row(checkpoint)
        run = self._run(row.key)
        params = {
            **run,
            **{name: getattr(row.head, name) for name in HEAD_COLUMNS},
            "body": row.body,
            "definition": checkpoint.run_definition_digest,
        }
        journal = tuple(
            JournalPut(kind, index, entry)
            for kind in OperationKind
            for index, entry in enumerate(row.journal(kind))
        )

        def apply(conn: sqlite3.Connection) -> bool:
            if not conn.execute(INSERT_RUN, params).rowcount:
                return False
            _put_journal(conn, run, journal)
            _set_run_status(conn, run, row.head.status)
            return True

        return apply

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        self._check_open()
        if not await self._write("create", self._inserted(checkpoint)):
            raise CheckpointAlreadyExists(f"a record exists under {checkpoint.checkpoint_key!r}")

    async def load(self, key: str) -> DurableCheckpoint | None:
        self._check_open()
        run = self._run(validate_checkpoint_key(key))
        rows: list[Any] = await self._read("load", lambda conn: conn.execute(LOAD, run).fetchall())
        row = _loaded(key, rows)
        return None if row is None else self._parts.decode_row(row)

    def _claiming(
        self, key: str, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> Callable[[sqlite3.Connection], tuple[int, bool, list[Any]]]:
        """The job that claims ``key``: (now, claimed, the record re-read or its head)."""
        run = self._run(key)
        recovery = int(mode is ClaimMode.RECOVERY)
        params = {**run, "cycle_index": cycle_index, "claim_token": claim_token}
        params.update(lease_ms=lease_ms, recovery=recovery)

        def apply(conn: sqlite3.Connection) -> tuple[int, bool, list[Any]]:
            now = wall_clock_ms()
            if not conn.execute(CLAIM, {**params, "now": now}).fetchall():
                return now, False, conn.execute(HEAD, run).fetchall()
            _set_run_status(conn, run, CheckpointStatus.RUNNING)
            return now, True, conn.execute(LOAD, run).fetchall()  # the claimed record

        return apply

    def _claimed(
        self,
        key: str,
        outcome: tuple[int, bool, list[Any]],
        *,
        cycle_index: int,
        claim_token: str,
        lease_ms: int,
        mode: ClaimMode,
    ) -> DurableCheckpoint:
        """The record a claim job claimed, or the refusal it met, raised."""
        now, claimed, found = outcome
        if claimed:
            row = _loaded(key, found)
            assert row is not None  # the claim changed it in this transaction
            return self._parts.decode_row(row)
        head = head_from(key, found[0]) if found else None
        error = claim_refusal(head, cycle_index, now, mode)
        if error is None and head is not None:  # only an overflow is left: raise it
            claimed_head(head, cycle_index, claim_token, now_ms=now, lease_ms=lease_ms, mode=mode)
        raise error or DurableConflict("the claim matched nothing")

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        self._check_open()
        check_claim_request(cycle_index, claim_token, lease_ms)
        validate_checkpoint_key(key)
        job = self._claiming(key, cycle_index, claim_token, lease_ms, mode)
        outcome = await self._write("claim", job)
        return self._claimed(
            key,
            outcome,
            cycle_index=cycle_index,
            claim_token=claim_token,
            lease_ms=lease_ms,
            mode=mode,
        )

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        self._check_open()
        check_claim_request(1, claim_token, lease_ms)
        run = self._run(validate_checkpoint_key(key))
        params = {**run, "claim_token": claim_token, "lease_ms": lease_ms}

        def apply(conn: sqlite3.Connection) -> tuple[int, list[Any], list[Any]]:
            now = wall_clock_ms()
            renewed = conn.execute(RENEW, {**params, "now": now}).fetchall()
            return now, renewed, [] if renewed else conn.execute(HEAD, run).fetchall()

        now, renewed, found = await self._write("renew_claim", apply)
        if renewed:
            expiry: int = renewed[0][0]
            return expiry
        head = head_from(key, found[0]) if found else None
        raise renew_refusal(head, claim_token, now) or DurableError(
            "checkpoint_claim_invalid", "lease expiry is outside the JSON-safe range"
        )

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        namespace = self._namespace
        lease, found = await self._write(
            operation, lambda conn: apply_write(conn, namespace, write)
        )
        if found is not None:
            raise refused(write, found)
        return replace(write.record, lease_expires_at_ms=lease)

    async def _delete_run(self, key: str, *, force: bool) -> bool:
        run = self._run(key)
        deleted: bool | None = await self._write(
            "delete", lambda conn: delete_run(conn, run, force)
        )
        if deleted is None:
            raise ClaimActive(f"run {key!r} is held by a live lease; delete it with force")
        return deleted

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        start = "" if after is None else after  # every key sorts after ""
        params: dict[str, Any] = {"namespace": self._namespace, "after": start, "limit": limit + 1}
        statement = LIST_RUNS
        if status is not None:
            statement, params["status"] = LIST_RUNS_STATUS, status.value
        rows: list[Any] = await self._read(
            "list_runs", lambda conn: conn.execute(statement, params).fetchall()
        )
        runs = [summary_of(row[0], head_from(row[0], row[1:])) for row in rows[:limit]]
        return runs, runs[-1].key if len(rows) > limit else None
