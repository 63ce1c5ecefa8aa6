"""The base under every agentflow backend: what they all share, written once.

A backend is a handful of I/O hooks (the ``_``-prefixed abstract methods
below). The base checks every argument and every checkpoint field before a
hook runs, binds the namespace, redacts and encodes through the codec, wraps
every record in an integrity envelope checked on every read (envelope.py), stores a
step that carries its changes as a delta and reads it back whole (stored.py), issues
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
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import TYPE_CHECKING, ClassVar, Final, NoReturn

from agentflow.checkpoint.base import (
    Checkpoint,
    Checkpointer,
    Redactor,
    ThreadInfo,
    ThreadPage,
    ThreadStatus,
)
from agentflow.checkpoint.chains import Decoded, Replaying, cut_off
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.cursor import CursorSigner
from agentflow.checkpoint.deltas import (
    ChainLinks,
    ChainRecord,
)
from agentflow.checkpoint.redaction import redact_none
from agentflow.checkpoint.stored import (
    EncodedCheckpoint,
    StoredForms,
    StoredRow,
    sealing_of,
    store_identity,
)
from agentflow.checkpoint.timestamps import instant_of, parse_instant
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

__all__ = [
    "ChainRecord",
    "CheckpointerBase",
    "Decoded",
    "EncodedCheckpoint",
    "StepRange",
    "StoredRow",
]

#: The listings whose cursors are told apart (a cursor of one fails on another).
_THREADS: Final = "threads"
_DUE: Final = "due"


def _in_order(previous: int | None, step: int, steps: StepRange) -> bool:
    """Whether ``step`` may follow ``previous`` in a history read of ``steps``."""
    if previous is None:
        return True
    return step < previous if steps.newest_first else step > previous


class CheckpointerBase(StoredForms, Checkpointer, abc.ABC):
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
        self._sealing, self._codec = sealing_of(codec, sealing)
        self._binds_store = bool(getattr(self._codec, "binds_store", False))
        self._store_id = b""
        self._closed = False
        self._signer: CursorSigner | None = None
        self._links = ChainLinks()
        #: Whether a step that carries its changes is stored as them (see :attr:`deltas`).
        self._deltas = True

    @property
    def namespace(self) -> str | None:
        """The tenant this checkpointer reads and writes (None: the default one)."""
        return self._namespace or None

    @property
    def deltas(self) -> bool:
        """Whether a checkpoint that carries :class:`~agentflow.checkpoint.model.StateChanges`
        is stored as what it changed (True, the default) or whole. Set it False while
        processes of an earlier release, which cannot read such records, share the
        store; steps stored as changes before stay readable either way."""
        return self._deltas

    @deltas.setter
    def deltas(self, value: bool) -> None:
        self._deltas = bool(value)

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
    async def _read_step(self, thread: str, step: int | None) -> StoredRow | Decoded | None:
        """The row at ``step`` (None: the highest step), or None. A backend may
        return the row already passed through :meth:`_decode_row`."""

    @abc.abstractmethod
    def _read_history(self, thread: str, steps: StepRange) -> AsyncIterator[StoredRow | Decoded]:
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
    async def _delete_rows(
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
        self._store_id = store_identity(secret)

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
            self._links.put(thread, step, None)
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
            if row is None:
                return None
            found = self._decode_row(thread, row)
            if step is not None and found.step != step:
                raise CheckpointCorrupted(f"thread {thread!r}: asked for step {step}, read another")
            return await self._whole(thread, found) if isinstance(found, ChainRecord) else found
        except Exception as exc:
            self._reraise(exc, "get")

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
        rows = self._rows(thread, steps)
        replaying = Replaying(self._steps_read(thread))
        previous: int | None = None
        left = steps.limit
        try:
            async for row in rows:
                if not steps.holds(row.step) or not _in_order(previous, row.step, steps):
                    raise CheckpointCorrupted(f"thread {thread!r}: history is out of step order")
                previous = row.step
                yield await replaying.whole(row) if isinstance(row, ChainRecord) else row
                if left is not None:
                    left -= 1
                    if not left:
                        return
        except Exception as exc:
            self._reraise(exc, "history")
        finally:
            await rows.aclose()

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

    async def _delete_steps(
        self, thread: str, before_step: int | None, cutoff_us: int | None
    ) -> int:
        """Delete as :meth:`_delete_rows` does, once every kept step stored as a
        change of a step that goes is written again as its full state (under the
        same token, so the steps stored on it stay readable; its revision goes up
        by one): a prune never leaves a step that cannot be read whole."""
        self._links.forget(thread)
        if before_step is not None or cutoff_us is not None:
            for record in await cut_off(self._range_read(thread), before_step, cutoff_us):
                await self._rewrite_whole(thread, record)
        return await self._delete_rows(thread, before_step, cutoff_us)

    async def _rewrite_whole(self, thread: str, record: ChainRecord) -> None:
        """Store ``record``'s step as its full state, as long as nobody rewrote it since."""
        cp = await self._whole(thread, record)
        token = record.token
        found = await self._write_step(
            thread, cp.step, lambda: self._encode(cp, whole_token=token), cp.revision
        )
        if found is not None:
            raise CheckpointConflict(thread, cp.step, cp.revision, found)

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


def _thread_in(value: object) -> str:
    """The thread id a cursor carries; a cursor is only as good as its content."""
    try:
        return validate_thread(value)
    except InvalidArgument as exc:
        raise InvalidCursor("cursor body is malformed") from exc
