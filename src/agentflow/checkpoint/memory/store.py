"""An in-process store over plain dicts and sorted lists: checkpoints, records, events."""

from __future__ import annotations

import bisect
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentflow.checkpoint.backend import EncodedCheckpoint, StepRange, StoredRow
from agentflow.checkpoint.base import Redactor, ThreadInfo, ThreadStatus
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.cursor import SECRET_BYTES
from agentflow.checkpoint.memory.events import MemoryEvents, StoredEvents
from agentflow.checkpoint.memory.runs import MemoryRuns, StoredRuns
from agentflow.checkpoint.plans import Write
from agentflow.checkpoint.rows import RunHead
from agentflow.checkpoint.store_base import StoreBase, run_thread_status
from agentflow.checkpoint.timestamps import wall_clock_ms
from agentflow.durable.enums import ClaimMode
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.errors import StoreNotFound

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["MemoryCheckpointer", "MemoryStore", "from_url"]


@dataclass
class _StoredStep:
    encoded: EncodedCheckpoint
    revision: int


@dataclass
class _Namespace:
    threads: dict[str, dict[int, _StoredStep]] = field(default_factory=dict)
    #: Thread ids in code point order, for O(page) listing.
    sorted_threads: list[str] = field(default_factory=list)
    #: (wake instant, thread) of every thread whose latest step waits on a timer.
    due: list[tuple[int, str]] = field(default_factory=list)
    #: Thread ids in code point order per status (their record's, else their latest step's).
    by_status: dict[str, list[str]] = field(default_factory=dict)
    #: The status each thread's record imposes, where it imposes one.
    run_status: dict[str, ThreadStatus] = field(default_factory=dict)
    runs: StoredRuns = field(default_factory=StoredRuns)
    events: StoredEvents = field(default_factory=StoredEvents)


class MemoryStore:
    """Shared storage for several :class:`MemoryCheckpointer` (one per namespace):
    each namespace's checkpoints, records and events.

    Until a checkpointer that may create it opens it, it is absent to those
    opened with ``create=False``, as a database without agentflow's tables is.
    """

    def __init__(self) -> None:
        self._namespaces: dict[str, _Namespace] = {}
        self.cursor_secret = os.urandom(SECRET_BYTES)
        self.created = False

    def namespace(self, name: str) -> _Namespace:
        """The data of namespace ``name`` ("" for the default one)."""
        return self._namespaces.setdefault(name, _Namespace())


class MemoryCheckpointer(MemoryRuns, MemoryEvents, StoreBase):
    """Keeps a namespace's checkpoints, records and events in memory (a Store).

    Everything is stored as the same bytes a durable backend would write,
    so a caller mutating its state after ``put`` changes nothing stored, and
    non-JSON state fails here exactly as it would on disk. Pass one
    :class:`MemoryStore` to several checkpointers to share it across namespaces.
    With ``create=False`` a store no other checkpointer created raises
    :class:`~agentflow.errors.StoreNotFound` here. ``clock`` (epoch
    milliseconds) is the lease clock; tests pass a fake one to move time.
    Leases held here are process-local: a memory store is for one process.
    """

    kind = "memory"

    def __init__(
        self,
        *,
        redact: Redactor | None = None,
        namespace: str | None = None,
        store: MemoryStore | None = None,
        codec: CheckpointCodec | None = None,
        sealing: KeyRing | None = None,
        create: bool = True,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec, sealing=sealing)
        self._store = store or MemoryStore()
        if create:
            self._store.created = True
        elif not self._store.created:
            raise StoreNotFound("no store: this MemoryStore was never opened with create=True")
        self._data = self._store.namespace(self._namespace)
        self._runs = self._data.runs
        self._events = self._data.events
        self._clock = clock

    def __repr__(self) -> str:
        return f"MemoryCheckpointer(namespace={self.namespace!r})"

    @property
    def database(self) -> str:
        return f"memory:{id(self._store):x}"

    def _status(self, latest: EncodedCheckpoint) -> str:
        return self._data.run_status.get(latest.thread, latest.status)

    def _run_status_changed(self, key: str, head: RunHead | None) -> None:
        status = None if head is None else run_thread_status(head.status)
        if self._data.run_status.get(key) == status:
            return
        latest = self._latest(key)
        self._unindex(latest)
        if status is None:
            self._data.run_status.pop(key, None)
        else:
            self._data.run_status[key] = status
        self._index(latest)

    def _latest(self, thread: str) -> EncodedCheckpoint | None:
        steps = self._data.threads.get(thread)
        return steps[max(steps)].encoded if steps else None

    def _unindex(self, latest: EncodedCheckpoint | None) -> None:
        if latest is None:
            return
        names = self._data.by_status[self._status(latest)]
        del names[bisect.bisect_left(names, latest.thread)]
        if latest.wake_us is not None and latest.interrupted:
            due = self._data.due
            del due[bisect.bisect_left(due, (latest.wake_us, latest.thread))]

    def _index(self, latest: EncodedCheckpoint | None) -> None:
        if latest is None:
            return
        bisect.insort(self._data.by_status.setdefault(self._status(latest), []), latest.thread)
        if latest.wake_us is not None and latest.interrupted:
            bisect.insort(self._data.due, (latest.wake_us, latest.thread))

    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        steps = self._data.threads.get(thread)
        existing = steps.get(step) if steps else None
        current = existing.revision if existing else 0
        if if_revision is not None and if_revision != current:
            return current
        encoded = encode()
        if steps is None:
            steps = self._data.threads[thread] = {}
            bisect.insort(self._data.sorted_threads, thread)
        before = self._latest(thread)
        steps[step] = _StoredStep(encoded, current + 1)
        if before is None or step >= before.step:
            self._unindex(before)
            self._index(encoded)
        return None

    async def _commit_step(
        self, thread: str, step: int, encode: Callable[[], EncodedCheckpoint], write: Write
    ) -> tuple[int | None, DurableCheckpoint]:
        """Atomic on the event loop: the step's revision, the guarded record write, the put."""
        existing = self._data.threads.get(thread, {}).get(step)
        if existing is not None:
            return existing.revision, write.record
        record = await self._apply("commit_step", write)
        return await self._write_step(thread, step, encode, 0), record

    async def _start_run(
        self,
        thread: str,
        encode: Callable[[], EncodedCheckpoint],
        checkpoint: DurableCheckpoint,
        claim_token: str,
        lease_ms: int,
    ) -> tuple[int | None, DurableCheckpoint | None]:
        """Atomic on the event loop: both refusals are decided before anything is written."""
        existing = self._data.threads.get(thread, {}).get(0)
        if existing is not None:
            return existing.revision, None
        if thread in self._runs.rows:
            return None, None
        row = self._parts.encode_row(checkpoint)
        await self._write_step(thread, 0, encode, 0)
        self._insert(row)
        cycle = checkpoint.cycle_index + 1
        return None, self._claimed(row, cycle, claim_token, lease_ms, ClaimMode.CONTINUE)

    async def _read_step(self, thread: str, step: int | None) -> StoredRow | None:
        steps = self._data.threads.get(thread)
        if not steps:
            return None
        stored = steps.get(max(steps) if step is None else step)
        if stored is None:
            return None
        return StoredRow(stored.encoded.step, stored.revision, stored.encoded.payload)

    async def _read_history(self, thread: str, steps: StepRange) -> AsyncIterator[StoredRow]:
        stored_steps = self._data.threads.get(thread, {})
        chosen = sorted(
            (step for step in stored_steps if steps.holds(step)), reverse=steps.newest_first
        )
        for step in chosen[: steps.limit]:
            stored = stored_steps.get(step)
            if stored is not None:
                yield StoredRow(step, stored.revision, stored.encoded.payload)

    async def _read_steps(self, thread: str, steps: Sequence[int]) -> list[StoredRow]:
        stored_steps = self._data.threads.get(thread, {})
        found = (stored_steps.get(step) for step in steps)
        return [
            StoredRow(stored.encoded.step, stored.revision, stored.encoded.payload)
            for stored in found
            if stored is not None
        ]

    def _info(self, thread: str) -> ThreadInfo:
        latest = self._latest(thread)
        assert latest is not None
        return latest.summary(self._data.run_status.get(thread))

    async def _read_threads(
        self, after: str, limit: int, status: ThreadStatus | None
    ) -> list[ThreadInfo]:
        names = (
            self._data.sorted_threads if status is None else self._data.by_status.get(status, [])
        )
        start = bisect.bisect_right(names, after)
        return [self._info(t) for t in names[start : start + limit]]

    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        due = self._data.due
        start = 0 if after is None else bisect.bisect_right(due, after)
        found: list[ThreadInfo] = []
        for wake_us, thread in due[start:]:
            if wake_us > now_us or len(found) == limit:
                break
            found.append(self._info(thread))
        return found

    async def _delete_rows(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        steps = self._data.threads.get(thread)
        if not steps:
            return 0
        before = self._latest(thread)
        doomed = [
            step
            for step, stored in steps.items()
            if (before_step is None or step < before_step)
            and (cutoff_us is None or stored.encoded.ts_us < cutoff_us)
        ]
        for step in doomed:
            del steps[step]
        after = self._latest(thread)
        if after is not before:
            self._unindex(before)
            self._index(after)
        if not steps:
            del self._data.threads[thread]
            del self._data.sorted_threads[bisect.bisect_left(self._data.sorted_threads, thread)]
        return len(doomed)

    async def _cursor_secret(self) -> bytes:
        return self._store.cursor_secret

    async def _close_store(self) -> None:
        """Nothing to release; the shared :class:`MemoryStore` stays usable."""


#: The stores ``memory://NAME`` URLs name, one per name, for this process.
_NAMED_STORES: dict[str, MemoryStore] = {}


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    codec: CheckpointCodec | None = None,
    sealing: KeyRing | None = None,
    create: bool = True,
) -> MemoryCheckpointer:
    """``memory://NAME``: every store opened on one name in this process
    shares one :class:`MemoryStore` (``memory://`` is the name "")."""
    name = url.split("://", 1)[1]
    store = _NAMED_STORES.setdefault(name, MemoryStore()) if create else _NAMED_STORES.get(name)
    if store is None:
        raise StoreNotFound(f"no memory store named {name!r} in this process")
    return MemoryCheckpointer(
        namespace=namespace, store=store, codec=codec, sealing=sealing, create=create
    )
