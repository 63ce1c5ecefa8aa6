"""The checkpoint model and the :class:`Checkpointer` protocol.

Every backend implements :class:`Checkpointer`; the runtime and the command
line depend on this module only, never on a backend. The docstrings below are
the contract that the conformance suite (:mod:`agentflow.checkpoint.testing`)
checks on every backend.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import Any, Final, Protocol, Self, runtime_checkable

from agentflow.checkpoint.model import (
    Checkpoint,
    Redactor,
    StateChanges,
    ThreadInfo,
    ThreadPage,
    ThreadStatus,
)

__all__ = [
    "CORE_METHODS",
    "Checkpoint",
    "Checkpointer",
    "CoreOnlyCheckpointer",
    "Redactor",
    "StateChanges",
    "ThreadInfo",
    "ThreadPage",
    "ThreadStatus",
    "with_defaults",
]

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

    def history(
        self,
        thread: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> AsyncIterator[Checkpoint]:
        """Yield the checkpoints of ``thread`` in ascending step order (newest
        first with ``newest_first=True``): every one, or those whose step is
        strictly between ``after`` and ``before`` (each a step, None:
        unbounded), at most ``limit`` of them (a positive int, None: all).

        The bounds are a keyset: to read the next page, pass the last step a
        page yielded as ``after`` (oldest first) or ``before`` (newest first).
        A bounded read costs O(limit) reads whatever the length of the thread,
        and every read goes in bounded batches, so memory does not grow with
        the thread either. Nothing is yielded for an unknown thread. A bound
        that is not valid raises :class:`~agentflow.errors.InvalidArgument`
        before anything is read.

        ``history(thread)`` alone is the original protocol's method: a backend
        that implements only that gets the bounds from a default that walks
        the whole thread (:func:`with_defaults`)."""
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
    if _bounded_history(type(checkpointer)) and all(
        callable(getattr(checkpointer, name, None)) for name in _LATER_METHODS
    ):
        return checkpointer  # type: ignore[return-value]

    return CoreOnlyCheckpointer(checkpointer)  # type: ignore[arg-type]


_LATER_METHODS: Final = ("list_threads_page", "list_due", "close", "__aenter__", "__aexit__")
#: What ``history`` takes beyond the thread since the protocol bounded it.
_HISTORY_BOUNDS: Final = frozenset({"after", "before", "limit", "newest_first"})


#: :func:`_bounded_history` of each class asked about (a signature costs ~20 µs).
_BOUNDED: dict[type, bool] = {}


def _bounded_history(cls: type) -> bool:
    """Whether ``cls.history`` takes the bounds (or any keyword) besides the thread."""
    known = _BOUNDED.get(cls)
    if known is None:
        try:
            history = cls.history  # type: ignore[attr-defined]
            parameters = inspect.signature(history).parameters.values()
        except (AttributeError, TypeError, ValueError):
            parameters = None
        known = _BOUNDED[cls] = parameters is not None and (
            any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
            or {p.name for p in parameters} >= _HISTORY_BOUNDS
        )
    return known


class CoreOnlyCheckpointer(Checkpointer):
    """A backend with only the original six methods, given every later one
    (a later method the backend has is its own, not the default)."""

    __slots__ = ("_inner",)

    def __init__(self, inner: Checkpointer) -> None:
        self._inner = inner

    def __repr__(self) -> str:
        return f"CoreOnlyCheckpointer({self._inner!r})"

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        return await self._inner.put(cp, if_revision=if_revision)

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        return await self._inner.get(thread, step)

    def history(
        self,
        thread: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> AsyncIterator[Checkpoint]:
        from agentflow.checkpoint.defaults import bounded_history

        if _bounded_history(type(self._inner)):
            return self._inner.history(
                thread, after=after, before=before, limit=limit, newest_first=newest_first
            )
        return bounded_history(
            self._inner, thread, after=after, before=before, limit=limit, newest_first=newest_first
        )

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        return await self._inner.list_threads(limit=limit, offset=offset)

    async def delete_thread(self, thread: str) -> None:
        await self._inner.delete_thread(thread)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        return await self._inner.prune(thread, before_step=before_step, older_than=older_than)

    async def list_threads_page(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        status: ThreadStatus | None = None,
    ) -> ThreadPage:
        native: Callable[..., Awaitable[ThreadPage]] | None = getattr(
            self._inner, "list_threads_page", None
        )
        if callable(native):
            return await native(limit=limit, cursor=cursor, status=status)
        return await super().list_threads_page(limit=limit, cursor=cursor, status=status)

    async def list_due(
        self, now: str | datetime, *, limit: int = 100, cursor: str | None = None
    ) -> ThreadPage:
        native: Callable[..., Awaitable[ThreadPage]] | None = getattr(self._inner, "list_due", None)
        if callable(native):
            return await native(now, limit=limit, cursor=cursor)
        return await super().list_due(now, limit=limit, cursor=cursor)

    async def close(self) -> None:
        close: Callable[[], Awaitable[None]] | None = getattr(self._inner, "close", None)
        if close is not None:
            await close()
