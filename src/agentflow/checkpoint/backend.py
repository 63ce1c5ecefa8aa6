"""The base under every agentflow backend: what they all share, written once.

A backend is a handful of I/O hooks (the ``_``-prefixed abstract methods
below). The base checks every argument and every checkpoint field before a
hook runs, binds the namespace, redacts and encodes through the codec, wraps
every record in an integrity envelope checked on every read (integrity.py), issues
and checks authenticated cursors (and the ``limit + 1`` peek that tells
whether another page follows), checks that every row read back is a valid
record of the key that was asked for, refuses use after :meth:`close`, and
turns driver errors into agentflow's. So the same call gives the same result,
and the same error class, on every backend.

Hooks receive checked values only: a thread id that passed
:func:`~agentflow.checkpoint.validation.validate_thread`, a step that is a
non-negative int, instants as epoch microseconds. They may raise the driver's
exceptions; :meth:`_driver_error` maps those.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final, NamedTuple, NoReturn

from agentflow.checkpoint import envelope
from agentflow.checkpoint.base import (
    Checkpoint,
    Checkpointer,
    Redactor,
    ThreadInfo,
    ThreadPage,
    ThreadStatus,
)
from agentflow.checkpoint.codec import CheckpointCodec, JsonCodec, RecordKey
from agentflow.checkpoint.cursor import CursorSigner
from agentflow.checkpoint.redaction import redact_checkpoint, redact_none
from agentflow.checkpoint.timestamps import instant_of, parse_instant, utc_now_iso
from agentflow.checkpoint.validation import (
    MAX_PAGE,
    StepRange,
    check_checkpoint,
    check_history_bounds,
    check_limit,
    check_offset,
    check_prune_bounds,
    check_status,
    validate_namespace,
    validate_revision,
    validate_step,
    validate_thread,
)
from agentflow.errors import (
    AgentflowError,
    CheckpointConflict,
    CheckpointCorrupted,
    InvalidArgument,
    InvalidCursor,
    StoreClosed,
)

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["CheckpointerBase", "EncodedCheckpoint", "StepRange", "StoredRow"]

#: The listings whose cursors are told apart (a cursor of one fails on another).
_THREADS: Final = "threads"
_DUE: Final = "due"


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


def _in_order(previous: int | None, step: int, steps: StepRange) -> bool:
    """Whether ``step`` may follow ``previous`` in a history read of ``steps``."""
    if previous is None:
        return True
    return step < previous if steps.newest_first else step > previous


def _is_int(value: object) -> bool:
    """An int column, as drivers return it (BSON's Int64 is a subclass), never a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _status(cp: Checkpoint) -> ThreadStatus:
    if not cp.next and not cp.interrupted:
        return "done"
    if cp.interrupted:
        return "waiting" if cp.wake_at is not None else "interrupted"
    return "running"


class CheckpointerBase(Checkpointer, abc.ABC):
    """Every public method of :class:`Checkpointer`, over a backend's I/O hooks.

    Subclasses set :attr:`kind`, call ``super().__init__`` with the namespace,
    redactor and codec, and implement the abstract hooks.
    """

    #: The backend's name in cursors and messages ("sqlite", "postgres", ...).
    kind: ClassVar[str]

    def __init__(
        self,
        *,
        namespace: str | None = None,
        redact: Redactor | None = None,
        codec: CheckpointCodec | None = None,
        sealing: KeyRing | None = None,
    ) -> None:
        self._namespace = validate_namespace(namespace)
        if redact is not None and not callable(redact):
            raise InvalidArgument(f"redact must be callable, got {redact!r}")
        if codec is not None and not isinstance(codec, CheckpointCodec):
            raise InvalidArgument(f"codec must have encode() and decode(), got {codec!r}")
        self._redact: Redactor = redact or redact_none
        #: The key ring every stored part is sealed with (None: integrity only).
        self._sealing, self._codec = _sealing_of(codec, sealing)
        self._binds_store = bool(getattr(self._codec, "binds_store", False))
        #: :attr:`RecordKey.store`, read before the first encode or decode when
        #: the codec binds it (hooks may encode and decode on other threads).
        self._store_id = b""
        self._closed = False
        self._signer: CursorSigner | None = None

    @property
    def namespace(self) -> str | None:
        """The tenant this checkpointer reads and writes (None: the default one)."""
        return self._namespace or None

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    # -- the hooks a backend implements -------------------------------------

    @abc.abstractmethod
    async def _write_step(
        self,
        thread: str,
        step: int,
        encode: Callable[[], EncodedCheckpoint],
        if_revision: int | None,
    ) -> int | None:
        """Store ``encode()`` at (thread, step), setting its revision to the stored
        one plus one (1 when new) and the thread's summary to it if it is the
        highest step, atomically. With ``if_revision`` given, write only when
        the stored revision equals it (0: nothing stored). Return None when
        written, else the stored revision that did not match. ``encode`` may
        be called on any thread and may raise; then nothing is written."""

    @abc.abstractmethod
    async def _read_step(self, thread: str, step: int | None) -> StoredRow | Checkpoint | None:
        """The row at ``step`` (None: the highest step), or None. A backend may
        return the row already passed through :meth:`_decode_row`."""

    @abc.abstractmethod
    def _read_history(self, thread: str, steps: StepRange) -> AsyncIterator[StoredRow | Checkpoint]:
        """The rows of ``thread`` whose step ``steps`` holds, in its order, at most
        ``steps.limit`` of them: keyset reads by step in bounded batches, each
        asking for no more rows than are left to yield, so a bounded read costs
        O(limit) whatever the length of the thread."""

    @abc.abstractmethod
    async def _read_threads(
        self, after: str, limit: int, status: ThreadStatus | None
    ) -> list[ThreadInfo]:
        """Up to ``limit`` thread summaries with id greater than ``after`` in code
        point order, of ``status`` when given, costing O(limit)."""

    @abc.abstractmethod
    async def _read_due(
        self, now_us: int, after: tuple[int, str] | None, limit: int
    ) -> list[ThreadInfo]:
        """Up to ``limit`` summaries of status "waiting" with wake instant at most
        ``now_us``, ordered by (wake instant, thread), after ``after`` in that
        order, costing O(limit)."""

    @abc.abstractmethod
    async def _delete_steps(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        """Delete the steps below ``before_step`` and older than ``cutoff_us``
        (each bound applies when given; neither: the whole thread), keep the
        summary right, and return how many were deleted."""

    @abc.abstractmethod
    async def _cursor_secret(self) -> bytes:
        """The store's cursor secret, created (random, 32 bytes) on first use and
        kept in the store, so every process on it issues the same cursors."""

    @abc.abstractmethod
    async def _close_store(self) -> None:
        """Release what this checkpointer created; called once."""

    def _driver_error(self, exc: Exception, operation: str) -> AgentflowError | None:
        """The agentflow error for a driver exception raised during ``operation``
        (a public method's name), or None to let it pass unchanged."""
        return None

    # -- shared work ---------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"this {type(self).__name__} is closed")

    def _reraise(self, exc: Exception, operation: str) -> NoReturn:
        if not isinstance(exc, AgentflowError):
            error = self._driver_error(exc, operation)
            if error is not None:
                raise error from exc
        raise exc

    async def _bind_store(self, operation: str) -> None:
        try:
            secret = await self._cursor_secret()
        except Exception as exc:
            self._reraise(exc, operation)
        self._store_id = _store_identity(secret)

    def _encode(self, cp: Checkpoint) -> EncodedCheckpoint:
        """Redact, encode and wrap a checked checkpoint; safe on any thread."""
        ts = cp.ts or utc_now_iso()
        if not cp.ts:
            cp = dataclasses.replace(cp, ts=ts)
        cp = redact_checkpoint(cp, self._redact)
        key = RecordKey(self._namespace, cp.thread, cp.step, self._store_id)
        payload = envelope.wrap(key, self._codec.encode(cp, key))
        wake_at = cp.wake_at
        return EncodedCheckpoint(
            thread=cp.thread,
            step=cp.step,
            payload=payload,
            ts=ts,
            ts_us=parse_instant(ts),
            interrupted=cp.interrupted,
            done=not cp.next and not cp.interrupted,
            wake_at=wake_at,
            wake_us=None if wake_at is None else parse_instant(wake_at),
            status=_status(cp),
        )

    def _decode_row(self, thread: str, row: StoredRow | tuple[Any, Any, bytes]) -> Checkpoint:
        """Check and decode a row read for ``thread``; safe on any thread.

        A revision or step column that is not a positive (resp. non-negative)
        int, a payload failing its integrity check, bytes the codec refuses, or
        a payload of another key all raise
        :class:`~agentflow.errors.CheckpointCorrupted`, never other data.
        """
        step, revision, payload = row
        if not _is_int(step) or step < 0:
            raise CheckpointCorrupted(f"thread {thread!r}: a stored step number is damaged")
        if not _is_int(revision) or revision < 1:
            raise CheckpointCorrupted(f"thread {thread!r} step {step}: the revision is damaged")
        key = RecordKey(self._namespace, thread, step, self._store_id)
        cp = self._codec.decode(envelope.unwrap(key, payload), key, revision)
        if cp.thread != thread or cp.step != step:
            raise CheckpointCorrupted(
                f"thread {thread!r} step {step} holds the checkpoint of another key"
            )
        return cp

    async def _cursors(self, operation: str) -> CursorSigner:
        signer = self._signer
        if signer is None:
            try:
                secret = await self._cursor_secret()
            except Exception as exc:
                self._reraise(exc, operation)
            signer = self._signer = CursorSigner(secret, self.kind, self._namespace)
        return signer

    # -- the protocol --------------------------------------------------------

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        self._check_open()
        check_checkpoint(cp)
        if if_revision is not None:
            validate_revision(if_revision)
        if self._binds_store and not self._store_id:
            await self._bind_store("put")
        thread, step = cp.thread, cp.step
        try:
            found = await self._write_step(thread, step, lambda: self._encode(cp), if_revision)
        except Exception as exc:
            self._reraise(exc, "put")
        if found is not None:
            raise CheckpointConflict(thread, step, if_revision or 0, found)
        return f"{thread}:{step}"

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        self._check_open()
        validate_thread(thread)
        if step is not None:
            validate_step(step)
        if self._binds_store and not self._store_id:
            await self._bind_store("get")
        try:
            row = await self._read_step(thread, step)
        except Exception as exc:
            self._reraise(exc, "get")
        if row is None or isinstance(row, Checkpoint):
            return row
        if step is not None and row.step != step:
            raise CheckpointCorrupted(f"thread {thread!r}: asked for step {step}, read another")
        return self._decode_row(thread, row)

    async def history(
        self,
        thread: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> AsyncIterator[Checkpoint]:
        self._check_open()
        validate_thread(thread)
        steps = check_history_bounds(after, before, limit, newest_first)
        if self._binds_store and not self._store_id:
            await self._bind_store("history")
        rows = self._read_history(thread, steps)
        previous: int | None = None
        left = steps.limit
        try:
            async for row in rows:
                cp = row if isinstance(row, Checkpoint) else self._decode_row(thread, row)
                if not steps.holds(cp.step) or not _in_order(previous, cp.step, steps):
                    raise CheckpointCorrupted(f"thread {thread!r}: history is out of step order")
                previous = cp.step
                yield cp
                if left is not None:
                    left -= 1
                    if not left:
                        return
        except Exception as exc:
            self._reraise(exc, "history")
        finally:
            close = getattr(rows, "aclose", None)
            if close is not None:
                await close()

    async def _threads(
        self, after: str, limit: int, status: ThreadStatus | None, operation: str
    ) -> list[ThreadInfo]:
        try:
            return await self._read_threads(after, limit, status)
        except Exception as exc:
            self._reraise(exc, operation)

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        self._check_open()
        check_limit(limit)
        check_offset(offset)
        after = ""
        while offset:
            size = min(offset, MAX_PAGE)
            skipped = await self._threads(after, size, None, "list_threads")
            if len(skipped) < size:
                return []
            offset -= size
            after = skipped[-1].thread
        return await self._threads(after, limit, None, "list_threads")

    async def list_threads_page(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        status: ThreadStatus | None = None,
    ) -> ThreadPage:
        self._check_open()
        check_limit(limit)
        check_status(status)
        listing = f"{_THREADS}:{status or ''}"
        after = ""
        if cursor is not None:
            body = (await self._cursors("list_threads_page")).decode(listing, cursor)
            after = _thread_in(body.get("after"))
        infos = await self._threads(after, limit + 1, status, "list_threads_page")
        if len(infos) <= limit:
            return ThreadPage(infos, None)
        del infos[limit:]
        signer = await self._cursors("list_threads_page")
        return ThreadPage(infos, signer.encode(listing, {"after": infos[-1].thread}))

    async def list_due(
        self, now: str | datetime, *, limit: int = 100, cursor: str | None = None
    ) -> ThreadPage:
        self._check_open()
        now_us = instant_of(now, what="now")
        check_limit(limit)
        after: tuple[int, str] | None = None
        if cursor is not None:
            body = (await self._cursors("list_due")).decode(_DUE, cursor)
            wake_us = body.get("wake_us")
            if type(wake_us) is not int or not -(2**63) <= wake_us < 2**63:
                raise InvalidCursor("cursor body is malformed")
            after = (wake_us, _thread_in(body.get("after")))
        try:
            infos = await self._read_due(now_us, after, limit + 1)
        except Exception as exc:
            self._reraise(exc, "list_due")
        if len(infos) <= limit:
            return ThreadPage(infos, None)
        del infos[limit:]
        last = infos[-1]
        try:
            last_wake_us = parse_instant(last.wake_at)
        except InvalidArgument as exc:
            raise CheckpointCorrupted(
                f"thread {last.thread!r}: the stored wake time is damaged"
            ) from exc
        body = {"wake_us": last_wake_us, "after": last.thread}
        return ThreadPage(infos, (await self._cursors("list_due")).encode(_DUE, body))

    async def delete_thread(self, thread: str) -> None:
        self._check_open()
        validate_thread(thread)
        try:
            await self._delete_steps(thread, None, None)
        except Exception as exc:
            self._reraise(exc, "delete_thread")

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        self._check_open()
        validate_thread(thread)
        cutoff_us = check_prune_bounds(before_step, older_than)
        try:
            return await self._delete_steps(thread, before_step, cutoff_us)
        except Exception as exc:
            self._reraise(exc, "prune")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._close_store()
        except Exception as exc:
            self._reraise(exc, "close")


def _sealing_of(
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


def _store_identity(secret: bytes) -> bytes:
    """The store's identity: one-way from its cursor secret, so it reveals no cursor key."""
    return hashlib.blake2b(secret, digest_size=16, person=b"agentflow-store").digest()


def _thread_in(value: object) -> str:
    """The thread id a cursor carries; a cursor is only as good as its content."""
    try:
        return validate_thread(value)
    except InvalidArgument as exc:
        raise InvalidCursor("cursor body is malformed") from exc
