"""Errors of the graph runtime, each with a stable ``code``.

They subclass :class:`agentflow.errors.AgentflowError` (not ``CheckpointError``)
because a run can fail for reasons that have nothing to do with storage: a
node raised, a route named no node, a timer is not due yet. Storage errors
(``CheckpointConflict``, ``StoreUnavailable``...) pass through unchanged.
"""

from __future__ import annotations

import functools
from typing import Any

from agentflow.errors import AgentflowError, CheckpointConflict, CheckpointNotSerializable

__all__ = [
    "CallAmbiguous",
    "CallFailed",
    "CannotReroute",
    "ConflictingUpdate",
    "GraphInvalid",
    "InvalidRoute",
    "InvalidUpdate",
    "NodeFailed",
    "NothingToReconcile",
    "NothingToResume",
    "NotDue",
    "RunError",
    "StepClaimed",
    "StepLimitExceeded",
    "StepNotFound",
    "UnknownOperation",
    "ThreadExists",
    "ThreadNotFound",
    "UnknownGraph",
    "UpdateNotSerializable",
]


class RunError(AgentflowError):
    """Base of every error the runtime raises itself."""

    code = "run_error"


class GraphInvalid(RunError, ValueError):
    """The graph definition is wrong: caught at ``add_*`` or ``compile`` time."""

    code = "graph_invalid"


class NodeFailed(RunError):
    """A node raised. Nothing of its step was stored; the cause is ``__cause__``.

    The thread's latest checkpoint is the last good one, so fixing the fault
    and calling ``resume(thread)`` re-runs the failed step.

    The message names the exception's type but not its text: a node's error
    text often quotes what it was handling (a key, a prompt, a record), and
    this message ends up in logs and on terminals. The exception itself stays
    available as ``__cause__`` (and ``cause_type`` holds its type's name).
    """

    code = "node_failed"

    def __init__(self, node: str, thread: str, step: int, cause: BaseException) -> None:
        self.node = node
        self.thread = thread
        self.step = step
        self.cause_type = type(cause).__name__
        super().__init__(
            f"node {node!r} failed in thread {thread!r} after step {step} with "
            f"{self.cause_type} (its text is kept out of this message; see __cause__)"
        )

    def __reduce__(self) -> tuple[type[NodeFailed], tuple[str, str, int, BaseException]]:
        cause = self.__cause__ or RuntimeError(self.cause_type)
        return (type(self), (self.node, self.thread, self.step, cause))


class InvalidUpdate(RunError, TypeError):
    """A node returned something other than a mapping with string keys, or None."""

    code = "invalid_update"

    def __init__(self, node: str, thread: str, got: object) -> None:
        self.node = node
        self.thread = thread
        super().__init__(
            f"node {node!r} of thread {thread!r} returned {type(got).__name__}; "
            "a node returns a mapping with string keys, or None"
        )


class UpdateNotSerializable(InvalidUpdate, CheckpointNotSerializable):
    """A node wrote a value that is not JSON; nothing of its step was stored.

    ``node`` is the writer (``"input"`` for a run's input, ``"fork"`` for a
    fork's update) and ``key`` the state key. Also a
    :class:`~agentflow.errors.CheckpointNotSerializable`, the store's error,
    which is the ``__cause__``.
    """

    code = "update_not_serializable"

    def __init__(self, node: str, thread: str, key: str, why: str) -> None:
        self.node = node
        self.thread = thread
        self.key = key
        TypeError.__init__(
            self, f"node {node!r} of thread {thread!r} wrote {key!r}, which is not JSON: {why}"
        )

    def __reduce__(self) -> tuple[type[UpdateNotSerializable], tuple[str, str, str, str]]:
        why = str(self).rpartition("which is not JSON: ")[2]
        return (type(self), (self.node, self.thread, self.key, why))


class ConflictingUpdate(RunError):
    """Two nodes of one step wrote the same key, which has no reducer."""

    code = "conflicting_update"


class InvalidRoute(RunError):
    """A conditional edge's router returned a name that is not a node or END."""

    code = "invalid_route"


class StepLimitExceeded(RunError):
    """A run took more steps than ``step_limit`` in one call; it was stopped
    after a stored step, so ``resume(thread)`` continues it."""

    code = "step_limit_exceeded"


class ThreadNotFound(RunError, LookupError):
    """The thread has no checkpoints (in this namespace)."""

    code = "thread_not_found"


class StepNotFound(RunError, LookupError):
    """The thread exists but has no checkpoint at that step (never, or pruned)."""

    code = "step_not_found"


class ThreadExists(RunError):
    """``run`` or ``fork`` was asked to start a thread that already has checkpoints."""

    code = "thread_exists"


class NothingToResume(RunError):
    """The run finished, or the step asked for is not a suspend."""

    code = "nothing_to_resume"


class NotDue(RunError):
    """A timer wait was resumed before its ``wake_at``; nothing was changed."""

    code = "not_due"

    def __init__(self, thread: str, step: int, wake_at: str, seconds_left: float) -> None:
        self.thread = thread
        self.step = step
        self.wake_at = wake_at
        self.seconds_left = seconds_left
        super().__init__(
            f"thread {thread!r} is waiting until {wake_at} "
            f"({seconds_left:.0f}s from now); it cannot be resumed before then"
        )


class StepClaimed(CheckpointConflict):
    """Another resume holds this suspended step, or has already answered it.

    Raised instead of a bare :class:`~agentflow.errors.CheckpointConflict` when
    the stored step carries another resume's claim: ``holder`` is who took it
    (``host:pid:token``) and ``until`` when that claim lapses (ISO-8601 UTC);
    a crashed holder's claim is taken over by the first resume after
    ``until``. ``moved_on`` is the run's latest step when the suspend was
    answered and the run went on (None while the claim is merely held).
    ``expected``/``actual`` are the revisions read and stored, as for any
    conflict, and ``code`` stays ``checkpoint_conflict``.
    """

    def __init__(
        self,
        thread: str,
        step: int,
        expected: int,
        actual: int,
        *,
        holder: str,
        until: str,
        moved_on: int | None = None,
    ) -> None:
        super().__init__(thread, step, expected, actual)
        self.holder = holder
        self.until = until
        self.moved_on = moved_on
        if moved_on is None:
            text = (
                f"thread {thread!r} step {step} is being resumed by {holder} "
                f"(its claim holds until {until}; if that process died, a resume "
                "after then takes the step over)"
            )
        else:
            text = (
                f"thread {thread!r} step {step} was already answered by {holder}; "
                f"the run has moved on to step {moved_on}"
            )
        self.args = (f"{text}; expected revision {expected}, found revision {actual}",)

    def __reduce__(self) -> tuple[Any, tuple[str, int, int, int]]:
        rebuild = functools.partial(
            type(self), holder=self.holder, until=self.until, moved_on=self.moved_on
        )
        return (rebuild, (self.thread, self.step, self.expected, self.actual))


class CannotReroute(RunError):
    """``fork(update=...)`` could not re-route: the checkpoint that chose the
    route (the step before the fork point) is pruned. Pass ``reroute=False``
    to keep the stored frontier."""

    code = "cannot_reroute"


class UnknownGraph(RunError, LookupError):
    """A thread was written by a graph this process does not have registered."""

    code = "unknown_graph"


class CallFailed(RunError):
    """A journaled external call failed for certain: nothing happened outside.

    Raise it from the function ``ctx.tool``/``ctx.model`` calls to say so
    (a refused request, a validation error before sending): the call is
    journaled ``failed`` with this typed error, and ``ctx.tool`` raises it to
    the node, now and on every replay, instead of calling again. Any *other*
    exception from that function leaves the call ambiguous (it may have
    acted), see :class:`CallAmbiguous`. ``failure`` is the call's own error
    code; ``code`` stays ``call_failed``.
    """

    code = "call_failed"

    def __init__(self, failure: str, message: str, *, retryable: bool = False) -> None:
        self.failure = failure
        self.message = message
        self.retryable = retryable
        super().__init__(f"{failure}: {message}")

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (
            functools.partial(type(self), retryable=self.retryable),
            (self.failure, self.message),
        )


class CallAmbiguous(BaseException):
    """A journaled call raised something other than :class:`CallFailed`: it may have acted.

    The call is journaled ``ambiguous`` and the step is abandoned: nothing of
    it is stored, and the run is suspended as ``reconciliation_required``
    until a policy, a :class:`~agentflow.durable.ReconciliationProvider` or
    an operator (``agentflow reconcile``) settles it. It derives from
    ``BaseException`` so a node's ``except Exception`` cannot swallow it and
    carry on as if the call had not happened. The exception the call raised
    is the ``__cause__``.
    """

    def __init__(self, operation_id: str, name: str) -> None:
        super().__init__(operation_id, name)
        self.operation_id = operation_id
        self.name = name

    def __str__(self) -> str:
        return f"call {self.name!r} ({self.operation_id}) may have acted; it needs reconciliation"


class NothingToReconcile(RunError):
    """A decision was given for a run that is not waiting for one."""

    code = "nothing_to_reconcile"


class DecisionStale(NothingToReconcile):
    """A decision names an attempt of a call that is no longer the ambiguous one
    (another decision settled it, and a later attempt may be ambiguous again)."""

    code = "reconciliation_decision_stale"


class UnknownOperation(RunError, LookupError):
    """A decision names an operation that is not ambiguous in the run's journal."""

    code = "unknown_operation"
