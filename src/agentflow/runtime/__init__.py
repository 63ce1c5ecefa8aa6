"""The graph runtime: one checkpoint per step, interrupts, timers, resume, fork,
and journaled external calls under a lease, so no side effect runs twice by accident.

It depends on the :class:`~agentflow.checkpoint.Checkpointer` and
:class:`~agentflow.durable.DurableStore` protocols only, so every backend
serves it. See ``docs/runtime.md`` for the model.
"""

from __future__ import annotations

from agentflow.runtime.blocking import SyncGraph
from agentflow.runtime.calls import ModelCall, ToolCall
from agentflow.runtime.context import NodeContext
from agentflow.runtime.durability import Durability
from agentflow.runtime.engine import CompiledGraph
from agentflow.runtime.errors import (
    CallAmbiguous,
    CallFailed,
    CannotReroute,
    ConflictingUpdate,
    DecisionStale,
    GraphInvalid,
    InvalidRoute,
    InvalidUpdate,
    NodeFailed,
    NotDue,
    NothingToReconcile,
    NothingToResume,
    RunError,
    StepClaimed,
    StepLimitExceeded,
    StepNotFound,
    ThreadExists,
    ThreadNotFound,
    UnknownGraph,
    UnknownOperation,
    UpdateNotSerializable,
)
from agentflow.runtime.events import EventKind, RunEvent
from agentflow.runtime.graph import END, START, Graph
from agentflow.runtime.recovery import Reconciliation, record_decision
from agentflow.runtime.reducers import Reducer, add, append, merge
from agentflow.runtime.result import RunResult, Status, status_of
from agentflow.runtime.settle import Waiter
from agentflow.runtime.worker import Worker, WorkerPass

__all__ = [
    "END",
    "START",
    "CallAmbiguous",
    "CallFailed",
    "CannotReroute",
    "CompiledGraph",
    "ConflictingUpdate",
    "Durability",
    "EventKind",
    "Graph",
    "GraphInvalid",
    "InvalidRoute",
    "InvalidUpdate",
    "ModelCall",
    "NodeContext",
    "NodeFailed",
    "NotDue",
    "DecisionStale",
    "NothingToReconcile",
    "NothingToResume",
    "Reconciliation",
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
    "ToolCall",
    "UnknownGraph",
    "UnknownOperation",
    "UpdateNotSerializable",
    "Waiter",
    "Worker",
    "WorkerPass",
    "add",
    "append",
    "merge",
    "record_decision",
    "status_of",
]
