"""What ``run`` and ``resume`` return, and a run's status read off a checkpoint."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agentflow.checkpoint.base import Checkpoint, ThreadInfo

if TYPE_CHECKING:
    from agentflow.durable import ResumeObservation
    from agentflow.runtime.recovery import Reconciliation

__all__ = ["RunResult", "Status", "status_of"]

#: ``running`` is a run whose latest checkpoint still has a frontier: it is
#: either being run right now or its process died (``resume`` continues it).
#: ``reconciliation_required``: a call may have acted and nobody knows; the run
#: waits for a decision (``agentflow reconcile``). ``failed``: an operator aborted it.
Status = Literal["done", "interrupted", "waiting", "running", "reconciliation_required", "failed"]


def status_of(cp: Checkpoint | ThreadInfo) -> Status:
    """The status of a run whose latest checkpoint (or listing entry) is ``cp``;
    a listing entry carries what the run's record imposes too."""
    if isinstance(cp, ThreadInfo):
        return cp.status
    if cp.done:
        return "done"
    if cp.interrupted:
        return "waiting" if cp.wake_at is not None else "interrupted"
    return "running"


@dataclass(frozen=True, slots=True)
class RunResult:
    """Where a ``run``/``resume`` call stopped: finished, suspended, or awaiting a decision."""

    #: The last checkpoint the call stored (or found).
    checkpoint: Checkpoint
    #: Every ambiguous call this call met, and how it was settled (or deferred).
    reconciliations: tuple[Reconciliation, ...] = ()
    #: The durable record's terminal result when the run was ended without
    #: finishing (an operator's abort), else None.
    terminal: Mapping[str, Any] | None = None

    @property
    def thread(self) -> str:
        return self.checkpoint.thread

    @property
    def step(self) -> int:
        return self.checkpoint.step

    @property
    def state(self) -> Mapping[str, Any]:
        return self.checkpoint.state

    @property
    def observations(self) -> tuple[ResumeObservation, ...]:
        """The calls still ambiguous: what an operator or a provider must settle."""
        return tuple(r.observation for r in self.reconciliations if r.pending)

    @property
    def status(self) -> Status:
        if self.terminal is not None:
            return "failed"
        if self.observations:
            return "reconciliation_required"
        return status_of(self.checkpoint)

    @property
    def interrupt_node(self) -> str | None:
        """The node that suspended the run, if it is suspended."""
        return self.checkpoint.interrupt_node

    @property
    def pending(self) -> Any:
        """The payload of the suspend: what a human must answer, or why it waits."""
        return self.checkpoint.interrupt_payload

    @property
    def wake_at(self) -> str | None:
        """For a timer wait, the ISO time from which ``resume`` is accepted."""
        return self.checkpoint.wake_at
