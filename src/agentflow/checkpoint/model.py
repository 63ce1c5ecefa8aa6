"""The checkpoint model: a checkpoint, a thread's summary, a page of them.

Plain, frozen data that every layer shares (the protocol in
:mod:`agentflow.checkpoint.base`, the checks in
:mod:`agentflow.checkpoint.validation`, every backend), kept apart from the
protocol so the modules that check and default it need not import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Checkpoint", "Redactor", "ThreadInfo", "ThreadPage", "ThreadStatus"]

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
