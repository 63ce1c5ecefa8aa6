"""agentflow: durable checkpointing for AI agent workflows."""

from __future__ import annotations

from agentflow.checkpoint import Checkpoint, Checkpointer, ThreadInfo, ThreadPage
from agentflow.errors import AgentflowError, CheckpointConflict, CheckpointError

__all__ = [
    "AgentflowError",
    "Checkpoint",
    "CheckpointConflict",
    "CheckpointError",
    "Checkpointer",
    "ThreadInfo",
    "ThreadPage",
    "__version__",
]

__version__ = "0.1.0"
