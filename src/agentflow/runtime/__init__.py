"""The graph runtime: one checkpoint per step, interrupts, timers, resume, fork.

It depends on the :class:`~agentflow.checkpoint.Checkpointer` protocol only, so
every backend serves it. See ``docs/runtime.md`` for the model.
"""

from __future__ import annotations

from agentflow.runtime.blocking import SyncGraph
from agentflow.runtime.context import NodeContext
from agentflow.runtime.engine import CompiledGraph
from agentflow.runtime.errors import (
    CannotReroute,
    ConflictingUpdate,
    GraphInvalid,
    InvalidRoute,
    InvalidUpdate,
    NodeFailed,
    NotDue,
    NothingToResume,
    RunError,
    StepClaimed,
    StepLimitExceeded,
    StepNotFound,
    ThreadExists,
    ThreadNotFound,
    UnknownGraph,
    UpdateNotSerializable,
)
from agentflow.runtime.events import EventKind, RunEvent
from agentflow.runtime.graph import END, START, Graph
from agentflow.runtime.reducers import Reducer, add, append, merge
from agentflow.runtime.result import RunResult, Status, status_of
from agentflow.runtime.settle import Waiter
from agentflow.runtime.worker import Worker, WorkerPass

__all__ = [
    "END",
    "START",
    "CannotReroute",
    "CompiledGraph",
    "ConflictingUpdate",
    "EventKind",
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
    "RunEvent",
    "RunResult",
    "Status",
    "StepClaimed",
    "StepLimitExceeded",
    "StepNotFound",
    "ThreadExists",
    "ThreadNotFound",
    "SyncGraph",
    "UnknownGraph",
    "UpdateNotSerializable",
    "Waiter",
    "Worker",
    "WorkerPass",
    "add",
    "append",
    "merge",
    "status_of",
]
