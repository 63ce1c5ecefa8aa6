"""The checkpoint model: a checkpoint, a thread's summary, a page of them.

Plain, frozen data that every layer shares (the protocol in
:mod:`agentflow.checkpoint.base`, the checks in
:mod:`agentflow.checkpoint.validation`, every backend), kept apart from the
protocol so the modules that check and default it need not import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Checkpoint", "Redactor", "StateChanges", "ThreadInfo", "ThreadPage", "ThreadStatus"]

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


def _shape(state: Mapping[str, Any]) -> tuple[tuple[str, int, int], ...]:
    """What :class:`StateChanges` checks a state against: each key, the identity
    of its value, and the length of a list or dict value (-1 for any other)."""
    return tuple(
        (key, id(value), len(value) if type(value) in (list, dict) else -1)
        for key, value in state.items()
    )


class StateChanges:
    """What made a step's ``state`` from the state of step ``base`` of its thread:
    the keys ``written`` (set to the value ``state`` holds), the keys ``appended``
    to (each a list whose last ``n`` items in ``state`` were added to the base's
    list) and the keys ``removed``. Every other key holds the base's value.

    Give it as :attr:`Checkpoint.changes` and a store keeps the step as what it
    changed, with a full state every so often so that a read replays a bounded
    number of steps (see docs/checkpoint.md "Steps stored as their changes"); it
    still reads back whole. The runtime passes it for every step it stores; a
    store passes it on every checkpoint it reads, so a checkpoint put back as it
    was read (copy, rekey) keeps its stored form.

    It describes ``state`` exactly as it is when the changes are built: a store
    uses it only while the checkpoint's state is that same mapping, with the
    same value object under every key and every list and dict value of the same
    length. A state given through ``dataclasses.replace`` or changed at its top
    level is stored whole. A change made in place inside a value (an item of a
    list replaced, a field of a nested dict) is not seen: the step would be
    stored without it, so change values by replacing them.
    """

    __slots__ = ("_shape", "_state", "appended", "base", "removed", "segment", "token", "written")

    def __init__(
        self,
        state: Mapping[str, Any],
        *,
        base: int | None,
        written: Iterable[str] = (),
        appended: Mapping[str, int] | None = None,
        removed: Iterable[str] = (),
        token: int | None = None,
        segment: bool = False,
    ) -> None:
        #: The step of the same thread whose state this one changes; None for a
        #: full state (a store's own mark on a full state steps are stored on).
        self.base = base
        self.written = tuple(written)
        self.appended: Mapping[str, int] = dict(appended or {})
        self.removed = tuple(removed)
        #: Marks a store sets on what it reads, so that a checkpoint put back as
        #: it was read is stored as it was: the identity it gave the state (None:
        #: a new one), and whether the step was stored as a segment (all changes
        #: since the segment before it, docs/checkpoint.md).
        self.token = token
        self.segment = segment
        self._state = state
        self._shape = _shape(state)

    def describes(self, state: Mapping[str, Any]) -> bool:
        """Whether these are still the changes of ``state`` (see the class)."""
        return state is self._state and _shape(state) == self._shape

    def __repr__(self) -> str:
        return (
            f"StateChanges(base={self.base!r}, written={self.written!r}, "
            f"appended={dict(self.appended)!r}, removed={self.removed!r})"
        )


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
    #: What the step changed in an earlier step's state (:class:`StateChanges`),
    #: so a store keeps only that; None: stored whole. Not compared.
    changes: StateChanges | None = field(default=None, compare=False, repr=False)

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
