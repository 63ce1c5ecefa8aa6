"""One rekey walk over a thread's three parts: checkpoints, durable record, events.

The store is opened with a codec that reports what opened each part
(:class:`~agentflow.checkpoint.sealing.SealedCodec`'s ``on_open`` and
``on_open_part``, in its migration mode so plaintext still opens), so one
read of a part says which key it is on; a part on another key than the
current one is written again, as itself, through the store, which seals it
with the current key:

* a checkpoint step: ``put(cp, if_revision=)`` the revision read (a
  concurrent writer wins and the step counts as skipped);
* a record: :meth:`~agentflow.checkpoint.store.Store.restore` of the record
  as read at revision + 1 (body and every journal entry; a write in between
  wins: skipped). A record whose holder's lease is live is left alone and
  counted as busy: re-sealing it would fence a running holder, so the walk
  is run again once it is released. The lease is compared with this
  machine's clock, as the worker's stranded scan does; a lapsed claim is
  re-sealed in place (claim and lease as stored), as a takeover would;
* an event: :meth:`~agentflow.checkpoint.store.Store.reseal_event` (events
  never change, so nothing races it).

Without a key ring every checkpoint and record is written again unsealed
(moving parts written before the integrity envelope into it); an event's
plain form has no envelope, so events are only counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Final, Literal

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.codec import CheckpointCodec, RecordKey
from agentflow.checkpoint.envelope import EVENT, PartOpened
from agentflow.checkpoint.plans import next_revision
from agentflow.checkpoint.sealing.codec import OpenedHook, SealedCodec
from agentflow.checkpoint.sealing.keyring import KeyRing
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.timestamps import wall_clock_ms
from agentflow.checkpoint.walk import has_record_key
from agentflow.durable.errors import DurableConflict
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.errors import CheckpointConflict, CheckpointCorrupted

__all__ = ["MAX_LISTED", "LeftRecord", "PartCounts", "RekeyReport", "Walk"]

#: At most this many left records are listed in a report (all are counted).
MAX_LISTED: Final = 1_000
_REWRITE_ALL: Final = "\x00every record"
#: Events read per replay page.
_EVENTS_PAGE: Final = 500
Kind = Literal["checkpoint", "record", "event"]


@dataclass(frozen=True, slots=True)
class LeftRecord:
    """A part left on a key other than the current one (key id None: plaintext):
    a checkpoint step, a thread's durable record (``step`` None) or one of its
    events (``event_id``)."""

    thread: str
    step: int | None
    key_id: str | None
    retired: bool
    kind: Kind = "checkpoint"
    event_id: str | None = None


@dataclass
class PartCounts:
    """Durable records or events: read, re-sealed, and as found per key id (None: plaintext)."""

    found: int = 0
    resealed: int = 0
    by_key: dict[str | None, int] = field(default_factory=dict)

    def saw(self, key_id: str | None) -> None:
        self.found += 1
        self.by_key[key_id] = self.by_key.get(key_id, 0) + 1


@dataclass
class RekeyReport:
    """What a rekey (or, with ``check_only``, an audit) found and did."""

    threads: int = 0
    #: Checkpoints read, re-sealed, and skipped (a concurrent write changed them first).
    records: int = 0
    resealed: int = 0
    skipped: int = 0
    #: Checkpoints per key id as read (None: plaintext), before any re-sealing.
    by_key: dict[str | None, int] = field(default_factory=dict)
    #: Durable records and events, as for checkpoints.
    runs: PartCounts = field(default_factory=PartCounts)
    events: PartCounts = field(default_factory=PartCounts)
    #: Durable records a write changed first (the write wins; see ``left``).
    runs_skipped: int = 0
    #: Threads whose record a live lease holds: not re-sealed; run rekey again.
    busy: list[str] = field(default_factory=list)
    #: Parts still on another key than the current one (up to MAX_LISTED).
    left: list[LeftRecord] = field(default_factory=list)
    left_count: int = 0
    #: (thread, message) for each thread that could not be read whole.
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    @property
    def retired_left(self) -> list[LeftRecord]:
        """The listed parts still sealed with a retired key."""
        return [record for record in self.left if record.retired]


class _Observed:
    """A plain codec that reports each record and part it opens, as :class:`SealedCodec` does."""

    __slots__ = ("_inner", "_observe", "on_open_part")

    def __init__(self, inner: CheckpointCodec, observe: OpenedHook, parts: PartOpened) -> None:
        self._inner, self._observe, self.on_open_part = inner, observe, parts

    def encode(self, cp: Checkpoint, key: RecordKey) -> bytes:
        return self._inner.encode(cp, key)

    def decode(self, payload: bytes, key: RecordKey, revision: int) -> Checkpoint:
        self._observe(key, None)
        return self._inner.decode(payload, key, revision)


class Walk:
    """One rekey run: what the store's codec saw opened, and the report."""

    def __init__(self, keyring: KeyRing | None, check_only: bool) -> None:
        self.keyring, self.check_only = keyring, check_only
        #: The key id parts should end on; in plain mode no part has it.
        self.current = keyring.current if keyring is not None else _REWRITE_ALL
        self.opened: dict[tuple[str, int], str | None] = {}
        self.parts: dict[tuple[str, str], str | None] = {}
        self.report = RekeyReport()

    def _observe(self, key: RecordKey, key_id: str | None) -> None:
        self.opened[key.thread, key.step] = key_id

    def _observe_part(self, key: str, part: str, key_id: str | None) -> None:
        self.parts[key, part] = key_id

    def codec(self, inner: CheckpointCodec) -> CheckpointCodec:
        """The codec to open the store with: it reports every key id, and opens plaintext."""
        if self.keyring is None:
            return _Observed(inner, self._observe, self._observe_part)
        return SealedCodec(
            self.keyring,
            inner,
            accept_plaintext=True,
            on_open=self._observe,
            on_open_part=self._observe_part,
        )

    def leave(
        self,
        thread: str,
        step: int | None,
        key_id: str | None,
        kind: Kind = "checkpoint",
        event_id: str | None = None,
    ) -> None:
        report = self.report
        report.left_count += 1
        if len(report.left) < MAX_LISTED:
            retired = self.keyring is not None and key_id in self.keyring.retired
            report.left.append(LeftRecord(thread, step, key_id, retired, kind, event_id))

    async def thread(self, store: Store, thread: str) -> None:
        """Re-seal (or, checking, audit) every part of ``thread``."""
        await self._checkpoints(store, thread)
        if has_record_key(thread):
            await self._record(store, thread)
        await self._events(store, thread)

    # -- checkpoints -----------------------------------------------------------

    async def _checkpoints(self, store: Store, thread: str) -> None:
        report, current = self.report, self.current
        self.opened.clear()
        try:
            async for cp in store.history(thread):
                report.records += 1
                key_id = self.opened.get((thread, cp.step))
                report.by_key[key_id] = report.by_key.get(key_id, 0) + 1
        except CheckpointCorrupted as exc:
            report.unreadable.append((thread, str(exc)))
        stale = sorted(step for (_, step), key_id in self.opened.items() if key_id != current)
        found = dict(self.opened)
        for step in stale:
            if self.check_only:
                self.leave(thread, step, found[thread, step])
                continue
            try:
                await self._reseal(store, thread, step)
            except CheckpointCorrupted as exc:
                report.unreadable.append((thread, str(exc)))

    async def _reseal(self, store: Store, thread: str, step: int) -> None:
        cp = await store.get(thread, step)
        if cp is None or self.opened.get((thread, step)) == self.current:
            return  # deleted or re-sealed by someone else meanwhile
        try:
            await store.put(cp, if_revision=cp.revision)
        except CheckpointConflict:
            self.report.skipped += 1
            if self.keyring is not None:
                await self._recheck(store, cp)
            return
        self.report.resealed += 1

    async def _recheck(self, store: Store, read: Checkpoint) -> None:
        self.opened.pop((read.thread, read.step), None)
        if await store.get(read.thread, read.step) is None:
            return
        key_id = self.opened.get((read.thread, read.step))
        if key_id != self.current:
            self.leave(read.thread, read.step, key_id)

    # -- the durable record ----------------------------------------------------

    async def _load(self, store: Store, key: str) -> tuple[DurableCheckpoint | None, str | None]:
        """The record and the key it is on: the first part's on another key than
        the current one, else the current one."""
        self.parts.clear()
        record = await store.load(key)
        stale = (key_id for (_, _), key_id in self.parts.items() if key_id != self.current)
        return record, next(stale, self.current)

    async def _record(self, store: Store, key: str) -> None:
        report = self.report
        try:
            record, key_id = await self._load(store, key)
        except CheckpointCorrupted as exc:
            report.unreadable.append((key, str(exc)))
            return
        if record is None:
            return
        report.runs.saw(key_id)
        if key_id == self.current:
            return
        if self.check_only:
            self.leave(key, None, key_id, "record")
            return
        lease = record.lease_expires_at_ms
        if record.claim_token is not None and lease is not None and lease > wall_clock_ms():
            report.busy.append(key)
            return
        try:
            await store.restore(record, replace(record, revision=next_revision(record.revision)))
        except DurableConflict:
            report.runs_skipped += 1
            if self.keyring is not None:
                await self._recheck_record(store, key)
            return
        report.runs.resealed += 1

    async def _recheck_record(self, store: Store, key: str) -> None:
        record, key_id = await self._load(store, key)
        if record is not None and key_id != self.current:
            self.leave(key, None, key_id, "record")

    # -- events ----------------------------------------------------------------

    async def _events(self, store: Store, thread: str) -> None:
        counts, after = self.report.events, None
        while True:
            self.parts.clear()
            try:
                page = await store.replay(thread, after=after, limit=_EVENTS_PAGE)
            except CheckpointCorrupted as exc:
                self.report.unreadable.append((thread, str(exc)))
                return
            for event in page.events:
                key_id = self.parts.get((event.event_id, EVENT))
                counts.saw(key_id)
                if self.keyring is None or key_id == self.current:
                    continue
                if self.check_only:
                    self.leave(thread, None, key_id, "event", event.event_id)
                elif await store.reseal_event(event):
                    counts.resealed += 1
            after = page.next_after
            if after is None:
                return
