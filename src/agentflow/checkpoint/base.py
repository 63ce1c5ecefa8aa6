"""The checkpoint model and the :class:`Checkpointer` protocol.

Every backend implements :class:`Checkpointer`; the runtime and the command
line depend on this module only, never on a backend. The docstrings below are
the contract that the conformance suite (:mod:`agentflow.checkpoint.testing`)
checks on every backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, runtime_checkable

__all__ = ["AsyncClosing", "Checkpoint", "Checkpointer", "Redactor", "ThreadInfo", "ThreadPage"]

#: A function applied to ``state`` and ``interrupt_payload`` before they are
#: persisted. It must return JSON-serializable data and must not mutate its input.
Redactor = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """A one-line summary of a thread for control-plane listing.

    Derived from the thread's latest checkpoint so a caller can enumerate runs
    (running / interrupted / finished) without reading full state. ``wake_at``
    (beyond the seed, defaulted) lets a timer worker find due runs from the
    listing alone.
    """

    thread: str
    latest_step: int
    interrupted: bool
    done: bool
    ts: str = ""
    wake_at: str | None = None


@dataclass(frozen=True, slots=True)
class ThreadPage:
    """One page of :meth:`Checkpointer.list_threads_page`.

    ``next_cursor`` is None on the last page; otherwise pass it back as
    ``cursor=`` to read the next page. It is opaque and bound to the
    checkpointer's namespace.
    """

    threads: list[ThreadInfo]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One persisted point in a run's history.

    ``next`` is the frontier of node names to run when resuming. An empty
    ``next`` with ``interrupted=False`` means the run finished. When
    ``interrupted`` is True the run is suspended: ``interrupt_node`` requested
    it and ``interrupt_payload`` is what a human must resolve; ``next`` still
    holds the frontier to resume once an answer is supplied.

    A suspend has a *kind* (:attr:`suspend_kind`). ``"human"`` waits for an
    external resume with a value. ``"timer"`` waits only for the clock:
    :attr:`wake_at` is the earliest ISO time the run should be resumed, and
    resuming re-runs the suspending node. Both share the interrupt machinery:
    a timer wait is an interrupt whose resolver is the clock, not a person.

    ``ts`` is the write time as ISO-8601; a store fills it in (UTC) when it is
    empty, so every stored checkpoint has one for ``prune(older_than=)``.
    """

    thread: str
    step: int
    state: Mapping[str, Any]
    next: tuple[str, ...] = ()
    parent: str | None = None
    ts: str = ""
    interrupted: bool = False
    interrupt_node: str | None = None
    interrupt_payload: Any = None
    #: ISO-8601 UTC time the run should wake, for a ``"timer"`` suspend; None
    #: for a ``"human"`` suspend (which waits for an explicit resume value).
    wake_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: Write count for this (thread, step), set by the store on read. Pass the
    #: value you read as ``put(..., if_revision=)`` to guard a read-modify-write
    #: against a concurrent resume. 0 means "never written".
    revision: int = 0

    @property
    def done(self) -> bool:
        """True when the run finished: nothing left to run and not suspended."""
        return not self.next and not self.interrupted

    @property
    def suspend_kind(self) -> str | None:
        """``"human"`` or ``"timer"`` while suspended, else None.

        Derived so the stored shape stays compatible: a suspend with
        ``wake_at`` set is a timer wait; a suspend without it waits for a human.
        """
        if not self.interrupted:
            return None
        return "timer" if self.wake_at is not None else "human"


class AsyncClosing:
    """``async with`` for every checkpointer: leaving the block calls ``close()``."""

    __slots__ = ()

    async def close(self) -> None:
        """Release what this object created; safe to call twice."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


@runtime_checkable
class Checkpointer(Protocol):
    """Persists and retrieves checkpoints by thread and step.

    A checkpointer may be bound to a ``namespace`` (a tenant) at construction:
    then every method reads and writes that namespace only, and two
    checkpointers with different namespaces on one store never see each
    other's threads. Thread ids must be non-empty strings without NUL
    (:class:`~agentflow.errors.InvalidThreadId` otherwise); ``step`` is a
    non-negative int.

    Errors: bad input raises a subclass of
    :class:`~agentflow.errors.InvalidArgument` and stores nothing; stored data
    that cannot be decoded raises :class:`~agentflow.errors.CheckpointCorrupted`;
    a lost connection raises :class:`~agentflow.errors.StoreUnavailable` with
    the driver error as ``__cause__``.
    """

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        """Persist ``cp`` and return its id (``"thread:step"``).

        When ``if_revision`` is given, the write is conditional: it succeeds
        only if the currently stored revision for ``(cp.thread, cp.step)``
        equals ``if_revision`` (or nothing is stored and ``if_revision`` is 0),
        otherwise it raises :class:`~agentflow.errors.CheckpointConflict` and
        stores nothing. ``None`` (default) is an unconditional upsert. Either
        way a successful write sets the stored revision to the previous one
        plus one, atomically: concurrent writers never lose a revision.

        ``state`` and ``interrupt_payload`` must be JSON (dicts with string
        keys, lists, strings, finite numbers, booleans, None); anything else
        raises :class:`~agentflow.errors.CheckpointNotSerializable` naming the
        thread, and nothing is written.
        """
        ...

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        """Return the checkpoint at ``step``, or the latest when ``step`` is
        None. Returns None if there is no such checkpoint. The returned
        checkpoint's ``revision`` is how many times that step was written."""
        ...

    def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        """Yield every checkpoint for ``thread`` in ascending step order.

        Reads in bounded batches, so memory does not grow with the length of
        the thread; nothing is yielded for an unknown thread."""
        ...

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        """Return a summary of each stored thread (latest step + status),
        ordered by thread id (code point order). ``limit``/``offset``
        paginate; prefer :meth:`list_threads_page`, whose cost does not grow
        with the offset."""
        ...

    async def list_threads_page(self, *, limit: int = 100, cursor: str | None = None) -> ThreadPage:
        """Return up to ``limit`` thread summaries after ``cursor``, ordered by
        thread id. A page costs O(limit), not a scan of every checkpoint.
        A tampered, foreign or unknown-version cursor raises
        :class:`~agentflow.errors.InvalidCursor`."""
        ...

    async def delete_thread(self, thread: str) -> None:
        """Remove all checkpoints for ``thread``; a missing thread is a no-op."""
        ...

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        """Delete checkpoints for ``thread`` older than a bound; return the
        count removed. ``before_step`` deletes steps strictly less than it;
        ``older_than`` is an ISO-8601 timestamp and deletes checkpoints whose
        ``ts`` is a strictly earlier instant (offsets compare correctly; a
        timestamp without offset is UTC). Both bounds together delete what
        matches both. Giving neither raises
        :class:`~agentflow.errors.InvalidArgument`."""
        ...
