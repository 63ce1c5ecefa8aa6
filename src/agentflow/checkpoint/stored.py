"""A checkpoint's stored form: the bytes a backend keeps and how the base reads them back.

:class:`StoredForms` is the part of
:class:`~agentflow.checkpoint.backend.CheckpointerBase` that turns a checked
checkpoint into a backend's :class:`EncodedCheckpoint` (redacted, encoded by
the codec, in its integrity envelope; a step with
:class:`~agentflow.checkpoint.model.StateChanges` as a record of a delta
chain, :mod:`agentflow.checkpoint.deltas`) and a stored row back into a
checkpoint (checked, decoded, and a chained record made whole by reading its
chain through the backend's range read, :mod:`agentflow.checkpoint.chains`).
Everything here is safe on any thread except the reads, which run on the
event loop.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from agentflow.checkpoint import envelope
from agentflow.checkpoint.chains import Decoded, RangeRead, Replaying, StepsRead
from agentflow.checkpoint.codec import CheckpointCodec, JsonCodec, RecordKey
from agentflow.checkpoint.deltas import (
    ChainLinks,
    ChainRecord,
    check_changes,
    full_document,
    full_link,
    new_token,
    next_delta,
    read_chained,
)
from agentflow.checkpoint.model import (
    Checkpoint,
    Redactor,
    StateChanges,
    ThreadInfo,
    ThreadStatus,
)
from agentflow.checkpoint.redaction import redact_checkpoint, redact_none
from agentflow.checkpoint.timestamps import parse_instant, utc_now_iso
from agentflow.checkpoint.validation import StepRange
from agentflow.errors import CheckpointCorrupted, InvalidArgument

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["EncodedCheckpoint", "Row", "StoredForms", "StoredRow", "sealing_of", "store_identity"]


class StoredRow(NamedTuple):
    """One stored step as a backend read it: the base checks and decodes it."""

    step: Any
    revision: Any
    payload: bytes


@dataclass(frozen=True, slots=True)
class EncodedCheckpoint:
    """A checkpoint ready for storage: the codec's bytes and the columns stores index."""

    thread: str
    step: int
    payload: bytes
    ts: str
    #: ``ts`` as microseconds since the epoch, so stores compare instants.
    ts_us: int
    interrupted: bool
    done: bool
    wake_at: str | None
    #: ``wake_at`` as microseconds since the epoch, for :meth:`list_due`.
    wake_us: int | None
    status: ThreadStatus

    def summary(self, run_status: ThreadStatus | None = None) -> ThreadInfo:
        """The :class:`ThreadInfo` of a thread whose latest step this is (and whose
        record imposes ``run_status``, if any)."""
        return ThreadInfo(
            self.thread, self.step, self.interrupted, self.done, self.ts, self.wake_at, run_status
        )


#: What a backend's read hooks give the base: a row to decode, or one it decoded.
Row = StoredRow | tuple[Any, Any, bytes] | Decoded


def _is_int(value: object) -> bool:
    """An int column, as drivers return it (BSON's Int64 is a subclass), never a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _stored_as(
    cp: Checkpoint,
    state: Mapping[str, Any],
    changes: StateChanges | None = None,
    ts: str | None = None,
) -> Checkpoint:
    """``cp`` as the codec encodes it: with ``state`` (a chain document, or its own),
    ``changes`` and ``ts`` (None: its own). Built field by field, as every put does
    once or twice: ``dataclasses.replace`` costs twice as much."""
    return Checkpoint(
        thread=cp.thread,
        step=cp.step,
        state=state,
        next=cp.next,
        parent=cp.parent,
        ts=cp.ts if ts is None else ts,
        interrupted=cp.interrupted,
        interrupt_node=cp.interrupt_node,
        interrupt_payload=cp.interrupt_payload,
        wake_at=cp.wake_at,
        extra=cp.extra,
        revision=cp.revision,
        changes=changes,
    )


def _status(cp: Checkpoint) -> ThreadStatus:
    if not cp.next and not cp.interrupted:
        return "done"
    if cp.interrupted:
        return "waiting" if cp.wake_at is not None else "interrupted"
    return "running"


class StoredForms:
    """Encoding and decoding of a store's checkpoints (see the module)."""

    _namespace: str
    _redact: Redactor
    _codec: CheckpointCodec
    #: :attr:`RecordKey.store`, read before the first encode or decode when
    #: the codec binds it (hooks may encode and decode on other threads).
    _store_id: bytes
    #: The chain links of the steps this store wrote or read lately.
    _links: ChainLinks
    _deltas: bool

    if TYPE_CHECKING:

        def _read_history(
            self, thread: str, steps: StepRange
        ) -> AsyncIterator[StoredRow | Decoded]: ...

    def _encode(self, cp: Checkpoint, *, whole_token: int | None = None) -> EncodedCheckpoint:
        """Redact, encode and wrap a checked checkpoint; safe on any thread.

        ``whole_token`` rewrites a stored step as the full state deltas build on,
        under the token it has (a prune's, so the steps kept on it stay readable):
        its state is what was stored, so it is not redacted again."""
        ts = cp.ts
        if not ts:
            ts = utc_now_iso()
            cp = _stored_as(cp, cp.state, cp.changes, ts)
        key = RecordKey(self._namespace, cp.thread, cp.step, self._store_id)
        if whole_token is None:
            cp = redact_checkpoint(cp, self._redact)
            payload = self._stored_form(cp, key)
        else:
            full = _stored_as(cp, full_document(cp.state, whole_token))
            payload = envelope.wrap(key, self._codec.encode(full, key), chained=True)
            self._links.put(cp.thread, cp.step, None)
        wake_at, interrupted = cp.wake_at, cp.interrupted
        return EncodedCheckpoint(
            thread=cp.thread,
            step=cp.step,
            payload=payload,
            ts=ts,
            ts_us=parse_instant(ts),
            interrupted=interrupted,
            done=not cp.next and not interrupted,
            wake_at=wake_at,
            wake_us=None if wake_at is None else parse_instant(wake_at),
            status=_status(cp),
        )

    def _stored_form(self, cp: Checkpoint, key: RecordKey) -> bytes:
        """The stored bytes of ``cp``: what it changed when its changes allow it,
        else its full state (chained when it has changes, so that later steps can
        be stored on it). A store with a redactor stores every state whole: a
        redacted value need not be what a delta of the redacted state holds."""
        changes = check_changes(cp) if self._deltas and self._redact is redact_none else None
        thread, step, state = cp.thread, cp.step, cp.state
        if changes is None:
            self._links.put(thread, step, None)
            return envelope.wrap(key, self._codec.encode(cp, key))
        token = new_token() if changes.token is None else changes.token
        base = None if changes.base is None else self._links.get(thread, changes.base)
        delta = None if base is None else next_delta(state, changes, token, base, step)
        if delta is not None:
            body = self._codec.encode(_stored_as(cp, delta.doc), key)
            payload = envelope.wrap(key, body, chained=True)
            if delta.fits(len(payload)):
                self._links.put(thread, step, delta.link(step, token, len(payload), state))
                return payload
        full = _stored_as(cp, full_document(state, token))
        payload = envelope.wrap(key, self._codec.encode(full, key), chained=True)
        self._links.put(thread, step, full_link(step, token, len(payload), state))
        return payload

    def _decode_row(
        self, thread: str, row: StoredRow | tuple[Any, Any, bytes] | Decoded
    ) -> Decoded:
        """Check and decode a row read for ``thread`` (a row already decoded is
        returned as it is); safe on any thread.

        A revision or step column that is not a positive (resp. non-negative)
        int, a payload failing its integrity check, bytes the codec refuses, or
        a payload of another key all raise
        :class:`~agentflow.errors.CheckpointCorrupted`, never other data. A
        chained record comes back as a :class:`ChainRecord`, to be made whole.
        """
        if isinstance(row, Checkpoint | ChainRecord):
            return row
        step, revision, payload = row
        if not _is_int(step) or step < 0:
            raise CheckpointCorrupted(f"thread {thread!r}: a stored step number is damaged")
        if not _is_int(revision) or revision < 1:
            raise CheckpointCorrupted(f"thread {thread!r} step {step}: the revision is damaged")
        key = RecordKey(self._namespace, thread, step, self._store_id)
        body, chained = envelope.unwrap_record(key, payload)
        cp = self._codec.decode(body, key, revision)
        if cp.thread != thread or cp.step != step:
            raise CheckpointCorrupted(
                f"thread {thread!r} step {step} holds the checkpoint of another key"
            )
        return read_chained(cp, len(payload)) if chained else cp

    async def _rows(self, thread: str, steps: StepRange) -> AsyncGenerator[Decoded, None]:
        """The decoded steps of ``thread`` that ``steps`` holds."""
        rows = self._read_history(thread, steps)
        try:
            async for row in rows:
                yield self._decode_row(thread, row)
        finally:
            close = getattr(rows, "aclose", None)
            if close is not None:
                await close()

    def _range_read(self, thread: str) -> RangeRead:
        return lambda steps: self._rows(thread, steps)

    def _steps_read(self, thread: str) -> StepsRead:
        async def read(steps: Sequence[int]) -> dict[int, Decoded]:
            rows = await self._read_steps(thread, steps)
            decoded = (self._decode_row(thread, row) for row in rows)
            return {row.step: row for row in decoded}

        return read

    async def _whole(self, thread: str, record: ChainRecord) -> Checkpoint:
        """The checkpoint a chained record stores: its chain read and replayed (and
        the links of it and its base kept, for the next step stored on it)."""
        replaying = Replaying(self._steps_read(thread), in_place=True)
        state = await replaying.state(record)
        for step in (record.step, *record.chain[-1:]):
            link = replaying.link(step)
            if link is not None:
                self._links.put(thread, step, link)
        return record.whole(state)

    async def _read_steps(self, thread: str, steps: Sequence[int]) -> Sequence[StoredRow | Decoded]:
        """The rows of ``steps`` that are stored (any order). This default reads
        the range they span; a backend that can read them alone overrides it."""
        wanted = set(steps)
        if not wanted:
            return []
        span = StepRange(min(wanted) - 1, max(wanted) + 1)
        found: list[StoredRow | Decoded] = []
        rows = self._read_history(thread, span)
        try:
            async for row in rows:
                if row[0] in wanted if isinstance(row, tuple) else row.step in wanted:
                    found.append(row)
        finally:
            close = getattr(rows, "aclose", None)
            if close is not None:
                await close()
        return found


def sealing_of(
    codec: CheckpointCodec | None, sealing: KeyRing | None
) -> tuple[KeyRing | None, CheckpointCodec]:
    """The one key ring of a store and its checkpoint codec.

    ``sealing`` seals checkpoints (around ``codec``, JSON by default), records
    and events alike. A sealing codec given as ``codec`` brings its key ring
    to the records and events, so no part of a thread is left plain.
    """
    ring: KeyRing | None = (
        getattr(codec, "keyring", None) if getattr(codec, "binds_store", False) else None
    )
    if sealing is None:
        return ring, codec or JsonCodec()
    from agentflow.checkpoint.sealing import KeyRing, SealedCodec

    if not isinstance(sealing, KeyRing):
        raise InvalidArgument(f"sealing needs a KeyRing, got {type(sealing).__name__}")
    if ring is not None:
        if ring is not sealing:
            raise InvalidArgument("give one key ring: sealing=, or a sealing codec, not both")
        return ring, codec or JsonCodec()
    return sealing, SealedCodec(sealing, codec)


def store_identity(secret: bytes) -> bytes:
    """The store's identity: one-way from its cursor secret, so it reveals no cursor key."""
    return hashlib.blake2b(secret, digest_size=16, person=b"agentflow-store").digest()
