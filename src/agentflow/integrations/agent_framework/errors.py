"""The errors of the Agent Framework adapter that agentflow's own classes do not cover.

Each is also Agent Framework's ``WorkflowCheckpointException``, so a workflow
runner (or a caller) that handles a built-in storage's checkpoint errors
handles these the same way; ``code`` is stable, as for every agentflow error.
Every failure of a read (``load``, ``get_latest``, the listings) is one of
them: an argument it refuses is :class:`InvalidCheckpointArgument` (still an
:class:`~agentflow.errors.InvalidArgument`); a store's own errors arrive as
:class:`CheckpointLoadFailed`, with the store error's ``code`` and
``retryable`` and the store error as ``__cause__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_framework.exceptions import WorkflowCheckpointException

from agentflow.errors import AgentflowError, CheckpointError, InvalidArgument

if TYPE_CHECKING:
    from agent_framework import WorkflowCheckpoint

__all__ = [
    "CheckpointIdConflict",
    "CheckpointLoadFailed",
    "CheckpointNotFound",
    "CheckpointStale",
    "CheckpointTypeNotPermitted",
    "InvalidCheckpointArgument",
]


class _FrameworkError(CheckpointError, WorkflowCheckpointException):
    def __init__(self, message: str) -> None:
        # The framework's base logs every message it is built with (at debug);
        # agentflow errors are logged by whoever handles them, once.
        super().__init__(message, None, None)


class CheckpointNotFound(_FrameworkError):
    """No checkpoint with that id in this storage's namespace and session.

    The message is Agent Framework's own ("No checkpoint found with ID ..."),
    so callers and the runner treat it as a built-in storage's missing
    checkpoint; ``checkpoint_id`` holds the id.
    """

    code = "checkpoint_not_found"

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(f"No checkpoint found with ID {checkpoint_id}")
        self.checkpoint_id = checkpoint_id


class CheckpointIdConflict(_FrameworkError):
    """A checkpoint id is already stored with other content, or by another
    workflow or session of the namespace; nothing was stored.

    Agent Framework makes a fresh id for every checkpoint, so this means two
    writers chose one id, never a retry: saving the same checkpoint again
    returns its id.
    """

    code = "checkpoint_id_conflict"


class CheckpointTypeNotPermitted(_FrameworkError):
    """A stored checkpoint names a class this storage does not permit.

    Not in ``allowed_checkpoint_types``, or a class whose own code loading
    would run; nothing of it ran. A refusal, not damage: permit the class
    (``allowed_checkpoint_types``) or migrate the value.
    """

    code = "checkpoint_type_not_permitted"


class InvalidCheckpointArgument(InvalidArgument, WorkflowCheckpointException):
    """A read was given an id or workflow name it cannot take; nothing was read."""

    def __init__(self, message: str) -> None:
        super().__init__(message, None, None)


class CheckpointLoadFailed(_FrameworkError):
    """A read failed in the store (unreachable, damaged data, closed, ...).

    ``code`` and ``retryable`` are the store error's (``store_unavailable``,
    ``checkpoint_corrupted``, ...), which is the ``__cause__``.
    """

    code = "checkpoint_load_failed"

    def __init__(self, cause: AgentflowError) -> None:
        super().__init__(str(cause))
        self.code = cause.code
        self.retryable = cause.retryable


class CheckpointStale(_FrameworkError):
    """The workflow's last save was refused, so its latest stored checkpoint is stale.

    Agent Framework only logs a warning when a save fails and runs on, so a
    paused run's latest stored checkpoint can predate the pause; resuming from
    it would restart without the pending requests. ``get_latest`` raises this
    instead, until a later save of the workflow succeeds. ``refused_code`` is
    the refusal's code; ``latest`` is the stale checkpoint (or None), for a
    caller who chooses to resume from it.
    """

    code = "checkpoint_stale"

    def __init__(
        self,
        workflow_name: str,
        refused_checkpoint_id: str,
        refused_code: str,
        latest: WorkflowCheckpoint | None,
    ) -> None:
        super().__init__(
            f"the latest save of workflow {workflow_name!r} (checkpoint {refused_checkpoint_id}) "
            f"was refused ({refused_code}); the latest stored checkpoint predates it. Fix the "
            "refusal and save again, or resume from .latest deliberately"
        )
        self.workflow_name = workflow_name
        self.refused_checkpoint_id = refused_checkpoint_id
        self.refused_code = refused_code
        self.latest = latest
