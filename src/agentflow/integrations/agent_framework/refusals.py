"""Refused saves, made visible: Agent Framework itself only logs a warning.

When a checkpoint save fails inside a workflow run, the framework's runner
logs a warning and carries on, so a run can report "paused, with pending
requests" while the latest stored checkpoint predates the pause, and a resume
from ``get_latest`` restarts without them. Every refused save is therefore

- logged at ERROR on ``agentflow.integrations.agent_framework`` with its
  stable ``code``, the workflow and the checkpoint id;
- counted per code in :data:`REFUSED_SAVES` (process-wide) and, when OpenTelemetry
  is configured, in the ``agentflow.checkpoint.refused_saves`` counter;
- recorded in the workflow's thread as a ``refused`` record on top (see
  :mod:`~agentflow.integrations.agent_framework.records`), so that
  ``get_latest``, in any process, raises
  :class:`~agentflow.integrations.agent_framework.CheckpointStale` until a
  later save succeeds.

A save that names no storable workflow (bad input) cannot be placed and is
only logged and counted; a refusal that cannot be recorded (the store is
down) is logged as such.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Final

from agentflow.checkpoint.base import Checkpoint
from agentflow.integrations.agent_framework.records import record
from agentflow.runtime.telemetry import refused_save

__all__ = ["REFUSED_SAVES", "log_refusal", "logger", "refused_record"]

logger: Final = logging.getLogger("agentflow.integrations.agent_framework")
#: Refused saves of this process, per stable error code.
REFUSED_SAVES: Counter[str] = Counter()


def log_refusal(code: str, workflow_name: object, checkpoint_id: object, message: str) -> None:
    """Count and log one refused save."""
    REFUSED_SAVES[code] += 1
    refused_save(code)
    logger.error(
        "checkpoint save refused (%s): workflow %r, checkpoint %r: %s. Agent Framework runs on "
        "without it; get_latest raises CheckpointStale until a later save succeeds",
        code,
        workflow_name,
        checkpoint_id,
        message,
    )


def refused_record(
    thread: str, step: int, checkpoint_id: str, code: str, live: int | None
) -> Checkpoint:
    """The ``refused`` record of a save refused with ``code``, on top of ``thread`` at ``step``."""
    fields = {"id": checkpoint_id, "live": live, "code": code}
    state = {"refused_checkpoint_id": checkpoint_id, "code": code}
    return record(thread, step, "refused", fields, state=state)
