"""Identities derived from a run's coordinates, equal to the original's.

They are pure functions of the checkpoint key and the position of a call or
event in the run, so a resumed run re-derives the same ids and the journal
and the accepted-once event store recognise what was already done. Parts are
joined with NUL, which checkpoint keys may not contain.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable

from agentflow.durable.wire.validators import validate_checkpoint_key

__all__ = [
    "model_operation_id",
    "new_checkpoint_key",
    "new_claim_token",
    "run_idempotency_key",
    "stable_event_id",
    "tool_idempotency_key",
    "tool_operation_id",
]


def _hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tool_idempotency_key(checkpoint_key: str, cycle_index: int, tool_call_id: str) -> str:
    """The ``idem_`` key a tool receives: stable across retries of the same call."""
    validate_checkpoint_key(checkpoint_key)
    return "idem_" + _hex(f"{checkpoint_key}\x00{cycle_index}\x00{tool_call_id}")[:32]


def run_idempotency_key(
    namespace: str | None, run_id: str, cycle_index: int, tool_call_id: str
) -> str:
    """The ``idem_`` key this runtime gives a tool: unique per run, stable across retries.

    The original's key (:func:`tool_idempotency_key`) is a function of the
    checkpoint key alone, so the same thread id in two namespaces, or a thread
    deleted and run again, repeats it, and a provider that deduplicates on it
    drops the second, different call. This one also names the namespace and
    the run's own id (drawn when its record is created), so no two runs share
    a key, while a retry of one call (same run, cycle and call id) keeps it.
    """
    validate_checkpoint_key(run_id)
    text = f"run\x00{namespace or ''}\x00{run_id}\x00{cycle_index}\x00{tool_call_id}"
    return "idem_" + _hex(text)[:32]


def stable_event_id(checkpoint_key: str, event_type: str, coordinates: Iterable[str] = ()) -> str:
    """The ``evt_`` id of a durable event, from its type and coordinates.

    The original's coordinates: ``checkpoint_created`` ``["0"]``;
    ``checkpoint_resumed`` ``[resume_attempt]``; ``operation_ambiguous``,
    ``operation_replayed``, ``reconciliation_required`` and
    ``reconciliation_resolved`` ``[operation_id, attempt]``;
    ``model_retry_duplicate_risk`` ``[operation_id, attempt + 1]``.
    """
    validate_checkpoint_key(checkpoint_key)
    return "evt_" + _hex("\x00".join([checkpoint_key, event_type, *coordinates]))[:32]


def model_operation_id(cycle_index: int, operation_slot: str) -> str:
    """The id of a model call, from its cycle and the caller's slot name for it."""
    return f"op_model_cycle_{cycle_index}_{_hex(operation_slot)[:16]}"


def tool_operation_id(cycle_index: int, position: int) -> str:
    """The id of the ``position``-th (1-based) tool call journaled in a cycle."""
    return f"op_tool_cycle_{cycle_index}_call_{position}"


def new_checkpoint_key() -> str:
    """A fresh key for a run that was given none."""
    return f"checkpoint_{uuid.uuid4().hex}"


def new_claim_token() -> str:
    """A fresh, unguessable claim token."""
    return f"claim_{uuid.uuid4().hex}"
