"""agentflow: durable checkpointing for AI agent workflows."""

from __future__ import annotations

from agentflow.checkpoint import Checkpoint, Checkpointer, Store, ThreadInfo, ThreadPage, open_store
from agentflow.errors import AgentflowError, CheckpointConflict, CheckpointError
from agentflow.runtime import END, START, CompiledGraph, Graph, NodeContext, RunResult, Worker

__all__ = [
    "END",
    "START",
    "AgentflowError",
    "Checkpoint",
    "CheckpointConflict",
    "CheckpointError",
    "Checkpointer",
    "CompiledGraph",
    "Graph",
    "NodeContext",
    "RunResult",
    "Store",
    "ThreadInfo",
    "ThreadPage",
    "Worker",
    "__version__",
    "open_store",
]

__version__ = "0.1.0"
