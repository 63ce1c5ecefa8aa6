"""Resume policies: what a run does with the record it finds under its key.

The decision is pure so every runtime (and every test) applies the same
rules, the original's, before any claim and any external call.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from agentflow.durable.enums import ResumePolicy
from agentflow.durable.errors import (
    CheckpointAlreadyExists,
    CheckpointNotFound,
    ClaimActive,
    DurableError,
)
from agentflow.durable.run.record import DurableCheckpoint

__all__ = ["Admission", "admission"]


class Admission(StrEnum):
    """What to do next with a run's key."""

    #: No record: create one (then claim its first cycle in continue mode).
    CREATE = "create"
    #: A live record: restore extensions, then take it with a recovery claim.
    RESUME = "resume"
    #: A terminal record: deliver its pending events, acknowledge, return its result.
    REPLAY_TERMINAL = "replay_terminal"


def admission(
    policy: ResumePolicy,
    existing: DurableCheckpoint | None,
    *,
    run_definition: Mapping[str, Any],
    run_definition_digest: str,
    now_ms: int,
) -> Admission:
    """Decide how a run starts, given the record found under its key (or None).

    * ``new``: a record already there is ``checkpoint_already_exists``;
    * ``require_existing``: no record is ``checkpoint_not_found``;
    * ``resume_if_present``: no record means create;
    * an existing record must embed this exact definition and digest
      (``checkpoint_definition_mismatch``), is replayed when terminal, and is
      refused while another holder's lease is live (``checkpoint_claim_active``).

    A ``resume_if_present`` create that loses a race to another creator should
    load the record and decide again.
    """
    if existing is None:
        if policy is ResumePolicy.REQUIRE_EXISTING:
            raise CheckpointNotFound("the checkpoint key does not exist")
        return Admission.CREATE
    if policy is ResumePolicy.NEW:
        raise CheckpointAlreadyExists(f"checkpoint key {existing.checkpoint_key!r} already exists")
    if (
        existing.run_definition_digest != run_definition_digest
        or existing.run_definition != run_definition
    ):
        raise DurableError(
            "checkpoint_definition_mismatch", "checkpoint run definition does not match this run"
        )
    if existing.terminal_result is not None:
        return Admission.REPLAY_TERMINAL
    lease = existing.lease_expires_at_ms
    if lease is not None and lease > now_ms:
        raise ClaimActive(f"checkpoint key {existing.checkpoint_key!r} has a live claim")
    return Admission.RESUME
