"""The errors of the Agent Framework adapter that agentflow's own classes do not cover.

Both are also Agent Framework's ``WorkflowCheckpointException``, so a workflow
runner (or a caller) that handles a stock storage's checkpoint errors handles
these the same way; ``code`` is stable, as for every agentflow error.
"""

from __future__ import annotations

from agent_framework.exceptions import WorkflowCheckpointException

from agentflow.errors import CheckpointError

__all__ = ["CheckpointIdConflict", "CheckpointNotFound"]


class _FrameworkError(CheckpointError, WorkflowCheckpointException):
    def __init__(self, message: str) -> None:
        # The framework's base logs every message it is built with (at debug);
        # agentflow errors are logged by whoever handles them, once.
        super().__init__(message, None, None)


class CheckpointNotFound(_FrameworkError):
    """No checkpoint with that id in this storage's namespace and session.

    ``load`` raises it where Agent Framework's protocol asks for a
    ``WorkflowCheckpointException``.
    """

    code = "checkpoint_not_found"


class CheckpointIdConflict(_FrameworkError):
    """A checkpoint id is already stored with other content, or by another
    workflow or session of the namespace; nothing was stored.

    Agent Framework makes a fresh id for every checkpoint, so this means two
    writers chose one id, never a retry: saving the same checkpoint again
    returns its id.
    """

    code = "checkpoint_id_conflict"
