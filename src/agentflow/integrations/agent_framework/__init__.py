"""Agent Framework's ``CheckpointStorage`` over any agentflow ``Checkpointer``.

``AgentflowCheckpointStorage(checkpointer)`` stores workflow checkpoints in any
backend (memory, file, SQLite, PostgreSQL, Redis, MongoDB), in the
checkpointer's namespace, encoded by ``agent_framework_mongodb``'s restricted
codec; ``copy_checkpoints`` moves checkpoints from another storage into it.
See docs/agent_framework.md.
"""

from __future__ import annotations

from agentflow.integrations.agent_framework.errors import (
    CheckpointIdConflict,
    CheckpointLoadFailed,
    CheckpointNotFound,
    CheckpointStale,
    CheckpointTypeNotPermitted,
    InvalidCheckpointArgument,
)
from agentflow.integrations.agent_framework.migrate import copy_checkpoints
from agentflow.integrations.agent_framework.refusals import REFUSED_SAVES
from agentflow.integrations.agent_framework.storage import AgentflowCheckpointStorage

__all__ = [
    "REFUSED_SAVES",
    "AgentflowCheckpointStorage",
    "CheckpointIdConflict",
    "CheckpointLoadFailed",
    "CheckpointNotFound",
    "CheckpointStale",
    "CheckpointTypeNotPermitted",
    "InvalidCheckpointArgument",
    "copy_checkpoints",
]
