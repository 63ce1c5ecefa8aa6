"""LangGraph's ``BaseCheckpointSaver`` over any agentflow ``Checkpointer``.

``AgentflowSaver(checkpointer)`` stores a graph's checkpoints and pending
writes in any backend (memory, file, SQLite, PostgreSQL, Redis, MongoDB), in
the checkpointer's namespace; ``copy_checkpoints`` moves threads from another
saver into it. See docs/langgraph.md.
"""

from __future__ import annotations

from agentflow.integrations.langgraph.known_types import DEFAULT_ALLOWED, KnownTypes
from agentflow.integrations.langgraph.migrate import copy_checkpoints
from agentflow.integrations.langgraph.saver import AgentflowSaver
from agentflow.integrations.langgraph.serde import StrictSerializer

__all__ = [
    "DEFAULT_ALLOWED",
    "AgentflowSaver",
    "KnownTypes",
    "StrictSerializer",
    "copy_checkpoints",
]
