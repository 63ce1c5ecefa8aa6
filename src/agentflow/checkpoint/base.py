"""The checkpoint model and the :class:`Checkpointer` protocol.

Every backend implements :class:`Checkpointer`; the runtime and the command
line depend on this module only, never on a backend. The docstrings below are
the contract that the conformance suite (:mod:`agentflow.checkpoint.testing`)
checks on every backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, Protocol, Self, runtime_checkable

__all__ = [
    "CORE_METHODS",
    "Checkpoint",
    "Checkpointer",
    "Redactor",
    "ThreadInfo",
    "ThreadPage",
    "ThreadStatus",
    "with_defaults",
]

#: A function applied to ``state``, ``interrupt_payload`` and ``extra`` before
#: they are persisted. It must return JSON-serializable data and must not mutate
#: its input.
Redactor = Callable[[Any], Any]

#: Where a run stands. From its latest checkpoint: ``"running"`` has nodes left
#: to run and is not suspended (between steps, or its process died mid-step);
#: ``"interrupted"`` waits for a human's answer; ``"waiting"`` waits for a timer
#: (``wake_at``); ``"done"`` finished. From its durable record, which a store
#: keeps beside the checkpoints: ``"reconciliation_required"`` waits for an
#: operator to settle an ambiguous call; ``"failed"`` was ended without
#: finishing (an operator's abort).
ThreadStatus = Literal[
    "running", "interrupted", "waiting", "done", "reconciliation_required", "failed"
]


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """A one-line summary of a thread for control-plane listing.

    Derived from the thread's latest checkpoint so a caller can enumerate runs
    (running / interrupted / finished) without reading full state, and from
    its durable record where that says more (``run_status``). ``wake_at``
    (defaulted) lets a timer worker find due runs from the listing alone.
    """

    thread: str
    latest_step: int
    interrupted: bool
    done: bool
    ts: str = ""
    wake_at: str | None = None
    #: The status the thread's record imposes (``"reconciliation_required"``,
    #: ``"failed"``), or None when the latest checkpoint says where it is.
    run_status: ThreadStatus | None = None

    @property
    def status(self) -> ThreadStatus:
        """The :data:`ThreadStatus` of the thread: its record's, else its latest checkpoint's."""
        if self.run_status is not None:
            return self.run_status
        if self.done:
            return "done"
        if self.interrupted:
            return "waiting" if self.wake_at is not None else "interrupted"
        return "running"


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


#: The methods of the original protocol: a backend that has these six is a
#: :class:`Checkpointer`, and gets every later method from its defaults.
CORE_METHODS: Final = ("put", "get", "history", "list_threads", "delete_thread", "prune")


def _has_core_methods(cls: type) -> bool:
    return all(any(name in base.__dict__ for base in cls.__mro__) for name in CORE_METHODS)


@runtime_checkable
class Checkpointer(Protocol):
    """Persists and retrieves checkpoints by thread and step.

    A checkpointer may be bound to a ``namespace`` (a tenant) at construction:
    then every method reads and writes that namespace only, and two
    checkpointers with different namespaces on one store never see each
    other's threads. Thread ids must be non-empty strings without NUL
    (:class:`~agentflow.errors.InvalidThreadId` otherwise); ``step`` is a
    non-negative int below 2**63.

    Errors are the same on every backend: bad input raises a subclass of
    :class:`~agentflow.errors.InvalidArgument` and stores nothing; stored data
    that cannot be decoded or fails its checks raises
    :class:`~agentflow.errors.CheckpointCorrupted`; a lost connection raises
    :class:`~agentflow.errors.StoreUnavailable` with the driver error as
    ``__cause__``; any call after :meth:`close` raises
    :class:`~agentflow.errors.StoreClosed`.

    The first six methods are the original protocol. Methods added later
    (:meth:`list_threads_page`, :meth:`list_due`, :meth:`close` and
    ``async with``) have default implementations in terms of those six, so a
    backend written against the original protocol still passes
    ``isinstance(x, Checkpointer)``; subclass this class to inherit the
    defaults, or pass an instance through :func:`with_defaults`. agentflow's
    own backends override every default with a native, O(page) version.
    """

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:
        # Only the original six methods are required of a backend; the later
        # ones have defaults. (typing's own hook would demand every member.)
        if cls is Checkpointer:
            return _has_core_methods(other)
        return NotImplemented

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        """Persist ``cp`` and return its id (``"thread:step"``).

        When ``if_revision`` is given, the write is conditional: it succeeds
        only if the currently stored revision for ``(cp.thread, cp.step)``
        equals ``if_revision`` (or nothing is stored and ``if_revision`` is 0),
        otherwise it raises :class:`~agentflow.errors.CheckpointConflict` and
        stores nothing. ``None`` (default) is an unconditional upsert. Either
        way a successful write sets the stored revision to the previous one
        plus one, atomically: concurrent writers never lose a revision.
        ``if_revision`` must be None or an int from 0 to 2**63-1.

        Every field is checked before anything is stored: ``state`` a mapping
        with str keys, ``next`` a tuple (or list) of str, ``interrupted`` a
        bool, ``ts`` (empty: stamped now, UTC) and ``wake_at`` ISO-8601 from
        1970 on, ``parent`` and ``interrupt_node`` str or None, ``extra`` a
        dict with str keys; a wrong field raises
        :class:`~agentflow.errors.InvalidArgument`. ``state``,
        ``interrupt_payload`` and ``extra`` must be JSON (dicts with string
        keys, lists, strings, finite numbers, booleans, None); anything else
        raises :class:`~agentflow.errors.CheckpointNotSerializable` naming the
        thread, and nothing is written.
        """
        ...

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        """Return the checkpoint at ``step``, or the latest when ``step`` is
        None. Returns None if there is no such checkpoint. The returned
        checkpoint's ``revision`` is how many times that step was written.
        A ``step`` that is not a non-negative int raises InvalidArgument."""
        ...

    def history(self, thread: str) -> AsyncIterator[Checkpoint]:
        """Yield every checkpoint for ``thread`` in ascending step order.

        Reads in bounded batches, so memory does not grow with the length of
        the thread; nothing is yielded for an unknown thread."""
        ...

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        """Return a summary of each stored thread (latest step + status),
        ordered by thread id (code point order). ``limit`` (1 to 10,000) and
        ``offset`` paginate; prefer :meth:`list_threads_page`, whose cost does
        not grow with the offset."""
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
        :class:`~agentflow.errors.InvalidArgument`, and so does a bound that
        is not valid; nothing is deleted then."""
        ...

    # -- added after the original protocol: each has a default ---------------

    async def list_threads_page(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        status: ThreadStatus | None = None,
    ) -> ThreadPage:
        """Return up to ``limit`` thread summaries after ``cursor``, ordered by
        thread id, only those whose :attr:`ThreadInfo.status` is ``status``
        when it is given. A page costs O(limit), not a scan of every thread or
        checkpoint. ``next_cursor`` is None on the last page. A tampered,
        foreign or unknown-version cursor raises
        :class:`~agentflow.errors.InvalidCursor`.

        The default (for a backend that has only the original methods) pages
        by offset, its cursor is a plain offset, and a status filter scans.
        """
        from agentflow.checkpoint.defaults import list_threads_page

        return await list_threads_page(self, limit=limit, cursor=cursor, status=status)

    async def list_due(
        self, now: str | datetime, *, limit: int = 100, cursor: str | None = None
    ) -> ThreadPage:
        """Return up to ``limit`` threads waiting on a timer that is due: the
        latest checkpoint is suspended with ``wake_at`` at or before ``now``
        (ISO-8601 or a datetime; naive means UTC). Ordered by ``wake_at``
        instant, then thread id. A page costs O(limit), however many threads
        wait for later timers or a human. Cursors as in
        :meth:`list_threads_page`.

        The default walks every thread.
        """
        from agentflow.checkpoint.defaults import list_due

        return await list_due(self, now, limit=limit, cursor=cursor)

    async def close(self) -> None:
        """Release what this checkpointer created (an injected client, pool or
        connection stays the caller's); safe to call twice. Every other call
        afterwards raises :class:`~agentflow.errors.StoreClosed`."""
        return None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def with_defaults(checkpointer: object) -> Checkpointer:
    """``checkpointer`` itself when it has every method of the protocol, else a
    thin wrapper that adds the defaults to a backend that has only the core
    six (the runtime and the command line call this on what they are given).
    Anything without the core six raises :class:`TypeError`."""
    if not _has_core_methods(type(checkpointer)):
        raise TypeError(
            f"{type(checkpointer).__name__} is not a Checkpointer: "
            f"it needs {', '.join(CORE_METHODS)}"
        )
    if all(callable(getattr(checkpointer, name, None)) for name in _LATER_METHODS):
        return checkpointer  # type: ignore[return-value]
    from agentflow.checkpoint.defaults import CoreOnlyCheckpointer

    return CoreOnlyCheckpointer(checkpointer)  # type: ignore[arg-type]


_LATER_METHODS: Final = ("list_threads_page", "list_due", "close", "__aenter__", "__aexit__")
