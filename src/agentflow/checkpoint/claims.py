"""Claims and leases: who may take a run, for how long, and when a lease is lost.

A claim takes the next cycle of a live run for ``lease_ms`` milliseconds on
the store's clock. While the lease is live nobody else can claim; once it
lapses only a *recovery* claim may take over, and it counts a resume. A
holder keeps its lease alive by renewing it (a heartbeat), which touches
nothing but the expiry and fails once the claim was taken over or lapsed, so
a holder that renews before each external call never starts one without a
lease. These are the rules; a backend evaluates them on its stored head in
the same statement that writes the claim.
"""

from __future__ import annotations

from dataclasses import replace

from agentflow.checkpoint.plans import next_revision
from agentflow.checkpoint.rows import RunHead
from agentflow.durable.enums import CheckpointStatus, ClaimMode
from agentflow.durable.errors import (
    CheckpointNotFound,
    ClaimActive,
    CycleConflict,
    DurableError,
    LeaseLost,
    RecoveryRequired,
    TerminalImmutable,
)
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER
from agentflow.durable.wire.validators import is_blank

__all__ = ["check_claim_request", "claim_refusal", "claimed_head", "renew_refusal"]

_CLAIM = "checkpoint_claim_invalid"
_CLAIMABLE = frozenset({CheckpointStatus.RUNNING, CheckpointStatus.RECONCILIATION_REQUIRED})


def check_claim_request(cycle_index: int, claim_token: str, lease_ms: int) -> None:
    """Refuse (``checkpoint_claim_invalid``) a malformed claim before any I/O."""
    if not isinstance(claim_token, str) or is_blank(claim_token):
        raise DurableError(_CLAIM, "claim token must be non-empty")
    for value, what in ((cycle_index, "claimed cycle"), (lease_ms, "lease_ms")):
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not 0 < value <= MAX_WIRE_INTEGER
        ):
            raise DurableError(_CLAIM, f"{what} must be positive and JSON-safe")


def claim_refusal(
    head: RunHead | None, cycle_index: int, now_ms: int, mode: ClaimMode
) -> DurableError | None:
    """Why a claim of ``cycle_index`` at ``now_ms`` must fail, or None when it may proceed.

    A claim needs a live (non-terminal) record whose committed cycle is the
    one before; a lease still running (expiry > now) blocks every claim; a
    lapsed lease, an ambiguous journal or ``reconciliation_required`` admit
    only a recovery claim.
    """
    if head is None:
        return CheckpointNotFound("no record under this key")
    if head.terminal or head.status not in _CLAIMABLE:
        return TerminalImmutable("a terminal record cannot be claimed")
    if head.cycle_index + 1 != cycle_index:
        return CycleConflict(f"the next cycle is {head.cycle_index + 1}, not {cycle_index}")
    lease = head.lease_expires_at_ms
    if lease is not None and lease > now_ms:
        return ClaimActive("another holder's lease is live")
    needs_recovery = (
        lease is not None
        or head.ambiguous
        or head.status is CheckpointStatus.RECONCILIATION_REQUIRED
    )
    if needs_recovery and mode is not ClaimMode.RECOVERY:
        return RecoveryRequired("only a recovery claim may take this record")
    return None


def claimed_head(
    head: RunHead,
    cycle_index: int,
    claim_token: str,
    *,
    now_ms: int,
    lease_ms: int,
    mode: ClaimMode,
) -> RunHead:
    """The head after a successful claim (revision + 1; resume_attempt + 1 for recovery)."""
    expiry = now_ms + lease_ms
    if expiry > MAX_WIRE_INTEGER:
        raise DurableError(_CLAIM, "lease expiry is outside the JSON-safe range")
    recovery = mode is ClaimMode.RECOVERY
    if recovery and head.resume_attempt >= MAX_WIRE_INTEGER:
        raise DurableError("checkpoint_resume_attempt_invalid", "resume_attempt overflow")
    return replace(
        head,
        revision=next_revision(head.revision),
        status=CheckpointStatus.RUNNING,
        resume_attempt=head.resume_attempt + 1 if recovery else head.resume_attempt,
        claim_token=claim_token,
        claimed_cycle=cycle_index,
        lease_expires_at_ms=expiry,
    )


def renew_refusal(head: RunHead | None, claim_token: str, now_ms: int) -> DurableError | None:
    """Why a renewal at ``now_ms`` must fail: no record, another claim, or a lapsed lease."""
    if head is None:
        return CheckpointNotFound("no record under this key")
    if head.claim_token != claim_token:
        return LeaseLost("the claim was replaced or released")
    if head.lease_expires_at_ms is None or head.lease_expires_at_ms <= now_ms:
        return LeaseLost("the lease lapsed before it was renewed")
    return None
