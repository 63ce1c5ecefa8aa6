"""The memory store's records: rows in the layout a database keeps, applied as planned.

Rows hold the head, the body bytes and each journal entry's bytes, as a
database backend writes them, and every write applies the same plan, so what
passes here exercises the shared rules, and a caller mutating a record after
a write changes nothing stored. Every operation runs without awaiting between
its check and its write, which makes it atomic on the event loop.
"""

from __future__ import annotations

import abc
import bisect
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field, replace

from agentflow.checkpoint.claims import (
    check_claim_request,
    claim_refusal,
    claimed_head,
    renew_refusal,
)
from agentflow.checkpoint.plans import JournalReplace, Write, refusal
from agentflow.checkpoint.rows import RunHead, RunRow, summary_of
from agentflow.checkpoint.runs import RunsBase
from agentflow.durable.enums import CheckpointStatus, ClaimMode, OperationKind
from agentflow.durable.errors import CheckpointAlreadyExists, ClaimActive, DurableError
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import RunSummary
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER
from agentflow.durable.wire.validators import validate_checkpoint_key

__all__ = ["MemoryRuns", "SortedKeys", "StoredRuns"]


class SortedKeys:
    """Keys in code point order (which is UTF-8 byte order), for O(page) listing."""

    def __init__(self) -> None:
        self.keys: list[str] = []

    def add(self, key: str) -> None:
        index = bisect.bisect_left(self.keys, key)
        if index == len(self.keys) or self.keys[index] != key:
            self.keys.insert(index, key)

    def discard(self, key: str) -> None:
        index = bisect.bisect_left(self.keys, key)
        if index < len(self.keys) and self.keys[index] == key:
            del self.keys[index]

    def after(self, key: str | None, count: int) -> list[str]:
        start = 0 if key is None else bisect.bisect_right(self.keys, key)
        return self.keys[start : start + count]


@dataclass
class _Run:
    """One stored record: its head, body bytes and journal entries' bytes, each
    journal a list this store alone holds, so a journal write changes one entry."""

    head: RunHead
    body: bytes
    journals: dict[OperationKind, list[bytes]]

    def row(self, key: str) -> RunRow:
        model, tool = (tuple(self.journals[kind]) for kind in OperationKind)
        return RunRow(key, self.head, self.body, model, tool)


class _Rows(MutableMapping[str, RunRow]):
    """The stored records as rows (each read copies the journals: O(entries))."""

    def __init__(self, runs: StoredRuns) -> None:
        self._runs = runs

    def __getitem__(self, key: str) -> RunRow:
        return self._runs.runs[key].row(key)

    def __setitem__(self, key: str, row: RunRow) -> None:
        journals = {kind: list(row.journal(kind)) for kind in OperationKind}
        self._runs.store(key, _Run(row.head, row.body, journals))

    def __delitem__(self, key: str) -> None:
        if self._runs.remove(key) is None:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._runs.runs

    def __iter__(self) -> Iterator[str]:
        return iter(self._runs.runs)

    def __len__(self) -> int:
        return len(self._runs.runs)


@dataclass
class StoredRuns:
    """One namespace's records, by key and by status; ``rows`` shows them as rows."""

    runs: dict[str, _Run] = field(default_factory=dict)
    keys: SortedKeys = field(default_factory=SortedKeys)
    by_status: dict[CheckpointStatus, SortedKeys] = field(default_factory=dict)

    @property
    def rows(self) -> _Rows:
        return _Rows(self)

    def store(self, key: str, run: _Run) -> None:
        previous = self.runs.get(key)
        if previous is not None and previous.head.status is not run.head.status:
            self.by_status[previous.head.status].discard(key)
        self.runs[key] = run
        self.keys.add(key)
        self.by_status.setdefault(run.head.status, SortedKeys()).add(key)

    def put(self, row: RunRow) -> None:
        self.rows[row.key] = row

    def remove(self, key: str) -> RunRow | None:
        run = self.runs.pop(key, None)
        if run is None:
            return None
        self.keys.discard(key)
        self.by_status[run.head.status].discard(key)
        return run.row(key)


def _journaled(run: _Run, write: Write) -> dict[OperationKind, list[bytes]]:
    """The journals after ``write``: a replacement's, or the stored lists with each
    put made in place (O(puts))."""
    if isinstance(write.journal, JournalReplace):
        return {
            OperationKind.MODEL: list(write.journal.model),
            OperationKind.TOOL: list(write.journal.tool),
        }
    for put in write.journal or ():
        run.journals[put.kind][put.index : put.index + 1] = [put.entry]
    return run.journals


class MemoryRuns(RunsBase, abc.ABC):
    """The record part of :class:`~agentflow.checkpoint.memory.MemoryCheckpointer`."""

    _runs: StoredRuns
    _clock: Callable[[], int]

    @abc.abstractmethod
    def _run_status_changed(self, key: str, head: RunHead | None) -> None:
        """Tell the checkpoint part that ``key``'s record now has ``head`` (None: gone)."""

    def _put_row(self, row: RunRow) -> None:
        self._runs.put(row)
        self._run_status_changed(row.key, row.head)

    def _row(self, key: str) -> RunRow | None:
        self._check_open()
        return self._runs.rows.get(validate_checkpoint_key(key))

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        self._check_open()
        self._insert(self._parts.encode_row(checkpoint))

    def _insert(self, row: RunRow) -> None:
        if row.key in self._runs.rows:
            raise CheckpointAlreadyExists(f"a record exists under {row.key!r}")
        self._put_row(row)

    async def load(self, key: str) -> DurableCheckpoint | None:
        row = self._row(key)
        return None if row is None else self._parts.decode_row(row)

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        check_claim_request(cycle_index, claim_token, lease_ms)
        return self._claimed(self._row(key), cycle_index, claim_token, lease_ms, mode)

    def _claimed(
        self,
        row: RunRow | None,
        cycle_index: int,
        claim_token: str,
        lease_ms: int,
        mode: ClaimMode,
    ) -> DurableCheckpoint:
        """Claim ``row`` now (as :meth:`claim` does), without awaiting: atomic on the loop."""
        now = self._clock()
        error = claim_refusal(None if row is None else row.head, cycle_index, now, mode)
        if error is not None:
            raise error
        assert row is not None
        head = claimed_head(
            row.head, cycle_index, claim_token, now_ms=now, lease_ms=lease_ms, mode=mode
        )
        claimed = replace(row, head=head)
        record = self._parts.decode_row(claimed)
        self._put_row(claimed)
        return record

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        check_claim_request(1, claim_token, lease_ms)
        self._check_open()
        run = self._runs.runs.get(validate_checkpoint_key(key))
        now = self._clock()
        error = renew_refusal(None if run is None else run.head, claim_token, now)
        if error is not None:
            raise error
        assert run is not None
        expiry = now + lease_ms
        if expiry > MAX_WIRE_INTEGER:
            raise DurableError(
                "checkpoint_claim_invalid", "lease expiry is outside the JSON-safe range"
            )
        self._runs.store(key, replace(run, head=replace(run.head, lease_expires_at_ms=expiry)))
        return expiry

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        run = self._runs.runs.get(write.key)
        if run is None or not write.guard.holds(run.head):
            raise refusal(None if run is None else run.head, write.guard)
        head = write.head
        if write.keep_lease:
            head = replace(head, lease_expires_at_ms=run.head.lease_expires_at_ms)
        body = run.body if write.body is None else write.body
        self._runs.store(write.key, _Run(head, body, _journaled(run, write)))
        self._run_status_changed(write.key, head)
        return replace(write.record, lease_expires_at_ms=head.lease_expires_at_ms)

    async def _delete_run(self, key: str, *, force: bool) -> bool:
        run = self._runs.runs.get(key)
        if run is None:
            return False
        lease = run.head.lease_expires_at_ms
        if not force and lease is not None and lease > self._clock():
            raise ClaimActive(f"run {key!r} is held by a live lease; delete it with force")
        self._runs.remove(key)
        self._run_status_changed(key, None)
        return True

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        index = self._runs.keys if status is None else self._runs.by_status.get(status)
        keys = [] if index is None else index.after(after, limit + 1)
        runs = [summary_of(key, self._runs.runs[key].head) for key in keys[:limit]]
        return runs, keys[limit - 1] if len(keys) > limit else None
