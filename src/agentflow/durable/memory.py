"""In-process durable stores. Not durable across processes; for tests and embedding.

They keep rows in the same layout a database backend writes (head, body
bytes, journal entry bytes) and apply the same planned writes, so what
passes here exercises the shared rules, and a caller mutating a record
after a write changes nothing stored. Every operation runs without awaiting
between its check and its write, which makes it atomic on the event loop.
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from agentflow.checkpoint.validation import validate_namespace
from agentflow.durable.canonical import MAX_WIRE_INTEGER, canonical_json, parse_json
from agentflow.durable.enums import CheckpointStatus, ClaimMode, OperationKind
from agentflow.durable.errors import CheckpointAlreadyExists, DurableError
from agentflow.durable.events import (
    AcceptedEvent,
    AppendOnceResult,
    check_append,
    resolve_append,
    run_member,
    sequence_of,
    stored_event,
)
from agentflow.durable.leases import check_claim_request, claim_refusal, claimed_head, renew_refusal
from agentflow.durable.lifecycle import ClosingStore
from agentflow.durable.paged import ListedRuns, ReplayedEvents
from agentflow.durable.planned import PlannedWrites
from agentflow.durable.record import DurableCheckpoint
from agentflow.durable.rows import RunRow, RunSummary
from agentflow.durable.transitions import (
    JournalPut,
    JournalReplace,
    Write,
    refusal,
)
from agentflow.durable.validators import CapabilityRef, validate_checkpoint_key
from agentflow.errors import StoreNotFound

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = [
    "DurableMemory",
    "InMemoryRunEventStore",
    "MemoryDurableStore",
    "from_url",
    "named_memory",
]


def wall_clock_ms() -> int:
    """Milliseconds since the epoch, the lease clock of stores without a server."""
    return time.time_ns() // 1_000_000


class _SortedKeys:
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
class _Runs:
    rows: dict[str, RunRow] = field(default_factory=dict)
    keys: _SortedKeys = field(default_factory=_SortedKeys)
    by_status: dict[CheckpointStatus, _SortedKeys] = field(default_factory=dict)

    def put(self, row: RunRow) -> None:
        previous = self.rows.get(row.key)
        if previous is not None and previous.head.status is not row.head.status:
            self.by_status[previous.head.status].discard(row.key)
        self.rows[row.key] = row
        self.keys.add(row.key)
        self.by_status.setdefault(row.head.status, _SortedKeys()).add(row.key)

    def remove(self, key: str) -> bool:
        row = self.rows.pop(key, None)
        if row is None:
            return False
        self.keys.discard(key)
        self.by_status[row.head.status].discard(key)
        return True


@dataclass(frozen=True, slots=True)
class _StoredEvent:
    """An accepted event as a database backend keeps it: digest, stored payload, sequence."""

    payload_digest: str
    stored: bytes
    sequence: int


@dataclass
class _Events:
    by_id: dict[str, _StoredEvent] = field(default_factory=dict)
    by_run: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    by_parent: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    sequence: int = 0


class DurableMemory:
    """Shared in-process storage for memory stores of several namespaces."""

    def __init__(self) -> None:
        self._runs: dict[str, _Runs] = {}
        self._events: dict[str, _Events] = {}

    def runs(self, namespace: str) -> _Runs:
        return self._runs.setdefault(namespace, _Runs())

    def events(self, namespace: str) -> _Events:
        return self._events.setdefault(namespace, _Events())


class _Closing(ClosingStore):
    async def close(self) -> None:
        """Nothing to release; safe to call twice."""


class MemoryDurableStore(PlannedWrites, ListedRuns, _Closing):
    """A :class:`~agentflow.durable.DurableStore` in process memory.

    ``clock`` returns epoch milliseconds; it is the lease clock (tests pass
    a fake one to move time). Pass one :class:`DurableMemory` to several
    stores to share it across namespaces.
    """

    kind: ClassVar[str] = "memory"

    def __init__(
        self,
        *,
        namespace: str | None = None,
        memory: DurableMemory | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        sealing: KeyRing | None = None,
    ) -> None:
        self._namespace = validate_namespace(namespace)
        self._sealing = sealing
        self._data = (memory or DurableMemory()).runs(self._namespace)
        self._clock = clock

    @property
    def namespace(self) -> str:
        return self._namespace

    def _row(self, key: str) -> RunRow | None:
        return self._data.rows.get(validate_checkpoint_key(key))

    async def create(self, checkpoint: DurableCheckpoint) -> None:
        row = self._parts.encode_row(checkpoint)
        if row.key in self._data.rows:
            raise CheckpointAlreadyExists(f"a record exists under {row.key!r}")
        self._data.put(row)

    async def load(self, key: str) -> DurableCheckpoint | None:
        row = self._row(key)
        return None if row is None else self._parts.decode_row(row)

    async def claim(
        self, key: str, *, cycle_index: int, claim_token: str, lease_ms: int, mode: ClaimMode
    ) -> DurableCheckpoint:
        check_claim_request(cycle_index, claim_token, lease_ms)
        row = self._row(key)
        now = self._clock()
        error = claim_refusal(None if row is None else row.head, cycle_index, now, mode)
        if error is not None:
            raise error
        assert row is not None
        claimed = replace(
            row,
            head=claimed_head(
                row.head, cycle_index, claim_token, now_ms=now, lease_ms=lease_ms, mode=mode
            ),
        )
        record = self._parts.decode_row(claimed)
        self._data.put(claimed)
        return record

    async def renew_claim(self, key: str, *, claim_token: str, lease_ms: int) -> int:
        check_claim_request(1, claim_token, lease_ms)
        row = self._row(key)
        now = self._clock()
        error = renew_refusal(None if row is None else row.head, claim_token, now)
        if error is not None:
            raise error
        assert row is not None
        expiry = now + lease_ms
        if expiry > MAX_WIRE_INTEGER:
            raise DurableError(
                "checkpoint_claim_invalid", "lease expiry is outside the JSON-safe range"
            )
        self._data.put(replace(row, head=replace(row.head, lease_expires_at_ms=expiry)))
        return expiry

    async def _apply(self, operation: str, write: Write) -> DurableCheckpoint:
        row = self._data.rows.get(write.key)
        if row is None or not write.guard.holds(row.head):
            raise refusal(None if row is None else row.head, write.guard)
        head = write.head
        if write.keep_lease:
            head = replace(head, lease_expires_at_ms=row.head.lease_expires_at_ms)
        model, tool = row.model_journal, row.tool_journal
        if isinstance(write.journal, JournalReplace):
            model, tool = write.journal.model, write.journal.tool
        elif isinstance(write.journal, JournalPut):
            entries = list(row.journal(write.journal.kind))
            entries[write.journal.index : write.journal.index + 1] = [write.journal.entry]
            if write.journal.kind is OperationKind.MODEL:
                model = tuple(entries)
            else:
                tool = tuple(entries)
        body = row.body if write.body is None else write.body
        self._data.put(RunRow(write.key, head, body, model, tool))
        return replace(write.record, lease_expires_at_ms=head.lease_expires_at_ms)

    async def delete(self, key: str) -> bool:
        return self._data.remove(validate_checkpoint_key(key))

    async def _list(
        self, status: CheckpointStatus | None, after: str | None, limit: int
    ) -> tuple[list[RunSummary], str | None]:
        index = self._data.keys if status is None else self._data.by_status.get(status)
        keys = [] if index is None else index.after(after, limit + 1)
        runs = [RunSummary.of(key, self._data.rows[key].head) for key in keys[:limit]]
        return runs, keys[limit - 1] if len(keys) > limit else None


class InMemoryRunEventStore(ReplayedEvents, _Closing):
    """A :class:`~agentflow.durable.DurableEventStore` in process memory.

    Cursors are ``{"sequence": n}``, one sequence per namespace starting at 1.
    Payloads are kept in their stored form (sealed with ``sealing``, a
    :class:`~agentflow.checkpoint.sealing.KeyRing`), as a database keeps them.
    """

    def __init__(
        self,
        *,
        namespace: str | None = None,
        memory: DurableMemory | None = None,
        sealing: KeyRing | None = None,
    ) -> None:
        self._namespace = validate_namespace(namespace)
        self._sealing = sealing
        self._data = (memory or DurableMemory()).events(self._namespace)

    @property
    def store_ref(self) -> CapabilityRef:
        return CapabilityRef("events.in-memory", "1")

    async def append_once(
        self, event_id: str, payload_digest: str, event: Mapping[str, Any]
    ) -> AppendOnceResult:
        computed = check_append(event_id, payload_digest, event)
        existing = self._data.by_id.get(event_id)
        stored = None if existing is None else existing.payload_digest
        if resolve_append(payload_digest, computed, stored) == "duplicate":
            assert existing is not None
            return AppendOnceResult(False, {"sequence": existing.sequence})
        data = canonical_json(event, what="event payload")
        sealed = self._parts.seal_event(event_id, data)
        self._data.sequence += 1
        sequence = self._data.sequence
        self._data.by_id[event_id] = _StoredEvent(payload_digest, sealed, sequence)
        copy = parse_json(data)
        for index, member in (
            (self._data.by_run, "run_id"),
            (self._data.by_parent, "parent_run_id"),
        ):
            run = run_member(copy, member)
            if run is not None:
                index.setdefault(run, []).append((sequence, event_id))
        return AppendOnceResult(True, {"sequence": sequence})

    async def _replay(
        self, run_id: str, after: Mapping[str, Any] | None, count: int, include_children: bool
    ) -> list[AcceptedEvent]:
        start = sequence_of(after)
        lists = [self._data.by_run.get(run_id, [])]
        if include_children:
            lists.append(self._data.by_parent.get(run_id, []))
        picked: list[AcceptedEvent] = []
        for sequence, event_id in _dedupe(heapq.merge(*(_from(items, start) for items in lists))):
            if len(picked) == count:
                break
            found = self._data.by_id[event_id]
            cursor, where = {"sequence": sequence}, f"stored event {event_id!r}"
            digest, stored = found.payload_digest, found.stored
            picked.append(
                stored_event(self._parts, event_id, digest, stored, cursor=cursor, where=where)
            )
        return picked


def _from(items: list[tuple[int, str]], start: int) -> Iterator[tuple[int, str]]:
    index = bisect.bisect_right(items, start, key=lambda item: item[0])
    return (items[position] for position in range(index, len(items)))


def _dedupe(items: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    last = -1
    for item in items:
        if item[0] != last:
            last = item[0]
            yield item


_NAMED: dict[str, DurableMemory] = {}


def named_memory(name: str, *, create: bool = True) -> DurableMemory:
    """The storage every ``memory://NAME`` store of this process shares.

    With ``create=False`` a name nothing opened yet raises
    :class:`~agentflow.errors.StoreNotFound` and stays unknown.
    """
    memory = _NAMED.get(name)
    if memory is None:
        if not create:
            raise StoreNotFound(f"no durable memory store named {name!r} in this process")
        memory = _NAMED[name] = DurableMemory()
    return memory


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    create: bool = True,
    sealing: KeyRing | None = None,
) -> MemoryDurableStore:
    """``memory://NAME``: every store opened on one name in this process shares
    one :class:`DurableMemory`, as ``memory://NAME`` checkpointers share theirs."""
    memory = named_memory(url.split("://", 1)[1], create=create)
    return MemoryDurableStore(namespace=namespace, memory=memory, sealing=sealing)
