"""Every enum of the durable protocol, valued by its snake_case wire name.

Each member is its wire string (``StrEnum``); :meth:`WireEnum.as_str` is the
original's spelling of the same thing, for code ported from it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from agentflow.durable.errors import DurableError

__all__ = [
    "AmbiguousModelPolicy",
    "AmbiguousToolPolicy",
    "CheckpointStatus",
    "ClaimMode",
    "OperationKind",
    "OperationState",
    "ReconciliationDecisionKind",
    "ResumePolicy",
    "ToolIdempotency",
    "WireEnum",
    "parse_enum",
]


class WireEnum(StrEnum):
    """A protocol enum: each member is its snake_case wire name."""

    def as_str(self) -> str:
        """The wire name (the original's ``as_str()``)."""
        return self.value


class ResumePolicy(WireEnum):
    """What a run does with a key that may already have a record."""

    NEW = "new"
    RESUME_IF_PRESENT = "resume_if_present"
    REQUIRE_EXISTING = "require_existing"


class AmbiguousModelPolicy(WireEnum):
    """What recovery does with a model call that started and left no receipt."""

    REQUIRE_RECONCILIATION = "require_reconciliation"
    RETRY_WITH_DUPLICATE_RISK = "retry_with_duplicate_risk"


class AmbiguousToolPolicy(WireEnum):
    """What recovery does with a tool call that started and left no receipt."""

    REQUIRE_RECONCILIATION = "require_reconciliation"
    RETRY_IDEMPOTENT_ONLY = "retry_idempotent_only"


class ToolIdempotency(WireEnum):
    """Whether a tool deduplicates repeated calls that carry one idempotency key."""

    SUPPORTED = "supported"
    UNSUPPORTED = "unsupported"
    UNKNOWN = "unknown"


class OperationKind(WireEnum):
    MODEL = "model"
    TOOL = "tool"


class OperationState(WireEnum):
    """Journal state of one external call (see ``OperationJournalEntry``)."""

    PLANNED = "planned"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    AMBIGUOUS = "ambiguous"


class ClaimMode(WireEnum):
    """``continue`` takes the next cycle of a healthy run; ``recovery`` takes over."""

    CONTINUE = "continue"
    RECOVERY = "recovery"


class CheckpointStatus(WireEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAIT_USER = "wait_user"
    COMPLETED = "completed"
    FAILED = "failed"
    MAX_CYCLES = "max_cycles"
    RECONCILIATION_REQUIRED = "reconciliation_required"

    @property
    def is_terminal(self) -> bool:
        """True for the statuses a finalized record may carry."""
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        CheckpointStatus.WAIT_USER,
        CheckpointStatus.COMPLETED,
        CheckpointStatus.FAILED,
        CheckpointStatus.MAX_CYCLES,
    }
)


class ReconciliationDecisionKind(WireEnum):
    DEFER = "defer"
    RETRY = "retry"
    REPLAY_SUCCESS = "replay_success"
    RECORD_FAILURE = "record_failure"
    ABORT = "abort"


_E = TypeVar("_E", bound=StrEnum)


def parse_enum(kind: type[_E], value: object, code: str, what: str) -> _E:
    """Return the member of ``kind`` spelled ``value``, else raise ``code``."""
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    raise DurableError(code, f"unknown {what} {value!r}")
