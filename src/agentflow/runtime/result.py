"""What ``run`` and ``resume`` return, and a run's status read off a checkpoint."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentflow.checkpoint.base import Checkpoint, ThreadInfo

__all__ = ["RunResult", "Status", "status_of"]

#: ``running`` is a run whose latest checkpoint still has a frontier: it is
#: either being run right now or its process died (``resume`` continues it).
Status = Literal["done", "interrupted", "waiting", "running"]


def status_of(cp: Checkpoint | ThreadInfo) -> Status:
    """The status of a run whose latest checkpoint (or listing entry) is ``cp``."""
    if cp.done:
        return "done"
    if cp.interrupted:
        return "waiting" if cp.wake_at is not None else "interrupted"
    return "running"


@dataclass(frozen=True, slots=True)
class RunResult:
    """Where a ``run``/``resume`` call stopped: finished, or suspended."""

    #: The last checkpoint the call stored.
    checkpoint: Checkpoint

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
    def status(self) -> Status:
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
