"""Errors of the graph runtime, each with a stable ``code``.

They subclass :class:`agentflow.errors.AgentflowError` (not ``CheckpointError``)
because a run can fail for reasons that have nothing to do with storage: a
node raised, a route named no node, a timer is not due yet. Storage errors
(``CheckpointConflict``, ``StoreUnavailable``...) pass through unchanged.
"""

from __future__ import annotations

from agentflow.errors import AgentflowError

__all__ = [
    "ConflictingUpdate",
    "GraphInvalid",
    "InvalidRoute",
    "InvalidUpdate",
    "NodeFailed",
    "NothingToResume",
    "NotDue",
    "RunError",
    "StepLimitExceeded",
    "StepNotFound",
    "ThreadExists",
    "ThreadNotFound",
    "UnknownGraph",
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
    """

    code = "node_failed"

    def __init__(self, node: str, thread: str, step: int, cause: BaseException) -> None:
        self.node = node
        self.thread = thread
        self.step = step
        super().__init__(
            f"node {node!r} failed in thread {thread!r} after step {step}: "
            f"{type(cause).__name__}: {cause}"
        )


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


class UnknownGraph(RunError, LookupError):
    """A thread was written by a graph this process does not have registered."""

    code = "unknown_graph"
