"""The graph runtime: one checkpoint per step, interrupts, timers, resume, fork.

It depends on the :class:`~agentflow.checkpoint.Checkpointer` protocol only, so
every backend serves it. See ``docs/runtime.md`` for the model.
"""

from __future__ import annotations

from agentflow.runtime.context import NodeContext
from agentflow.runtime.engine import CompiledGraph
from agentflow.runtime.errors import (
    ConflictingUpdate,
    GraphInvalid,
    InvalidRoute,
    InvalidUpdate,
    NodeFailed,
    NotDue,
    NothingToResume,
    RunError,
    StepLimitExceeded,
    StepNotFound,
    ThreadExists,
    ThreadNotFound,
    UnknownGraph,
)
from agentflow.runtime.graph import END, START, Graph
from agentflow.runtime.reducers import Reducer, add, append, merge
from agentflow.runtime.result import RunResult, Status, status_of
from agentflow.runtime.worker import Worker

__all__ = [
    "END",
    "START",
    "CompiledGraph",
    "ConflictingUpdate",
    "Graph",
    "GraphInvalid",
    "InvalidRoute",
    "InvalidUpdate",
    "NodeContext",
    "NodeFailed",
    "NotDue",
    "NothingToResume",
    "Reducer",
    "RunError",
    "RunResult",
    "Status",
    "StepLimitExceeded",
    "StepNotFound",
    "ThreadExists",
    "ThreadNotFound",
    "UnknownGraph",
    "Worker",
    "add",
    "append",
    "merge",
    "status_of",
]
