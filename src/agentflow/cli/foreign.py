"""Threads another framework wrote through an agentflow adapter.

LangGraph's ``AgentflowSaver`` and Agent Framework's
``AgentflowCheckpointStorage`` keep their own records in agentflow threads,
each tagged ``extra[KEY] = {"v": ..., "kind": ..., ...}``. A LangGraph
checkpoint is at step ``2k`` and its pending writes at ``2k + 1``: such a
record has no frontier or interrupt of its own, and its steps are sparse by
design, so the command line shows what each record is and never infers
pruning from gaps. Agent Framework checkpoints are at steps 0, 1, 2... with
the workflow's frontier and pending request as the record's own (its
adapter writes that view), so they read as a run's steps (``stepwise``).
Either way ``resume`` and ``fork`` go back to the framework that owns the
thread. The adapters are not imported: reading the tag needs neither
framework installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from agentflow.checkpoint.base import Checkpoint
from agentflow.cli.errors import ForeignThread

__all__ = ["FRAMEWORKS", "ForeignRecord", "foreign_record"]

#: The tag each adapter writes under ``extra``, and the framework it stands for.
FRAMEWORKS: Final = {
    "langgraph": ("LangGraph", "AgentflowSaver"),
    "agent_framework": ("Agent Framework", "AgentflowCheckpointStorage"),
}
#: What each kind of record is, in the words ``history`` and ``show`` use.
_KINDS: Final = {
    "checkpoint": "checkpoint",
    "writes": "pending writes",
    "deleted": "deleted checkpoint",
    "namespaces": "namespace list",
    "index": "checkpoint index",
}


@dataclass(frozen=True, slots=True)
class ForeignRecord:
    """One adapter record: the framework, the adapter, the kind, and its fields."""

    framework: str
    adapter: str
    kind: str
    fields: dict[str, Any]

    @property
    def stepwise(self) -> bool:
        """Whether the record reads as a run's step (its frontier, interrupt and
        state are the workflow's own), as Agent Framework checkpoints do."""
        return self.framework == "Agent Framework" and self.kind == "checkpoint"

    @property
    def what(self) -> str:
        """e.g. ``LangGraph checkpoint 1f1e...`` or ``LangGraph pending writes of 1f1e...``."""
        name = _KINDS.get(self.kind, self.kind)
        ident = self.fields.get("id")
        if not isinstance(ident, str):
            return f"{self.framework} {name}"
        return f"{self.framework} {name} {'of ' if self.kind == 'writes' else ''}{ident}"

    def refusal(self, thread: str, command: str) -> ForeignThread:
        return ForeignThread(
            f"thread {thread!r} was written by {self.framework} (through {self.adapter}); "
            f"continue it with {self.framework}, which owns its state: agentflow {command} "
            "runs agentflow graphs only (history, show, copy and delete work on it)"
        )


def foreign_record(cp: Checkpoint) -> ForeignRecord | None:
    """The adapter record ``cp`` is, or None for a record agentflow's runtime wrote."""
    for key, (framework, adapter) in FRAMEWORKS.items():
        tag = cp.extra.get(key)
        if isinstance(tag, dict) and isinstance(tag.get("kind"), str):
            return ForeignRecord(framework, adapter, str(tag["kind"]), tag)
    return None
