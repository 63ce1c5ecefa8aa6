"""Settling ambiguous calls: observations, decisions, and who may decide.

An operation is *ambiguous* when it was journaled as started and no receipt
came back: the external system may or may not have acted. Nothing inside
the run can know which, so only someone who can look outside it (an operator,
or a provider that queries the external system) may settle it; a policy may
only choose to retry when a retry is safe or its risk was accepted up front.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentflow.durable.enums import (
    AmbiguousModelPolicy,
    AmbiguousToolPolicy,
    OperationKind,
    OperationState,
    ReconciliationDecisionKind,
    ToolIdempotency,
    parse_enum,
)
from agentflow.durable.errors import DurableError
from agentflow.durable.run.journal import OperationError
from agentflow.durable.wire.canonical import validate_i_json
from agentflow.durable.wire.validators import require_non_empty, require_positive

__all__ = [
    "MODEL_RISK",
    "TOOL_RISK",
    "ReconciliationDecision",
    "ReconciliationError",
    "ReconciliationProvider",
    "ResumeObservation",
    "policy_decision",
]

#: The risk named when a model call may have run: a second call costs again.
MODEL_RISK = "duplicate_model_request_and_cost"
#: The risk named when a tool call may have run: its side effect may repeat.
TOOL_RISK = "unknown_tool_side_effect"
_DECISION = "checkpoint_reconciliation_decision_invalid"
_OBSERVATION = "checkpoint_resume_observation_invalid"


@dataclass(frozen=True, slots=True)
class ResumeObservation:
    """What a resumed run reports about one ambiguous operation."""

    operation_id: str
    operation_kind: OperationKind
    cycle_index: int
    risk: str
    state: OperationState = OperationState.AMBIGUOUS
    idempotency_support: ToolIdempotency | None = None
    #: Which attempt of the call is ambiguous (1 the first; beyond the original's
    #: wire, written only when known): the attempt an operator's decision names.
    attempt: int | None = None

    def validate(self) -> None:
        require_non_empty(self.operation_id, "resume observation operation_id")
        require_positive(self.cycle_index, "resume observation cycle_index")
        if self.attempt is not None:
            require_positive(self.attempt, "resume observation attempt")
        if self.state is not OperationState.AMBIGUOUS:
            raise DurableError(_OBSERVATION, "resume observation state must be ambiguous")
        require_non_empty(self.risk, "resume observation risk")

    def to_dict(self) -> dict[str, Any]:
        wire = {
            "operation_id": self.operation_id,
            "operation_kind": self.operation_kind.value,
            "cycle_index": self.cycle_index,
            "state": self.state.value,
            "risk": self.risk,
            "idempotency_support": (
                None if self.idempotency_support is None else self.idempotency_support.value
            ),
        }
        if self.attempt is not None:
            wire["attempt"] = self.attempt
        return wire

    @classmethod
    def from_dict(cls, value: object) -> ResumeObservation:
        """Read the wire form (``state`` defaults to ambiguous) and validate it."""
        if not isinstance(value, Mapping):
            raise DurableError(_OBSERVATION, "resume observation must be an object")
        support = value.get("idempotency_support")
        observation = cls(
            operation_id=value.get("operation_id"),  # type: ignore[arg-type]
            operation_kind=parse_enum(
                OperationKind, value.get("operation_kind"), _OBSERVATION, "operation_kind"
            ),
            cycle_index=value.get("cycle_index"),  # type: ignore[arg-type]
            risk=value.get("risk"),  # type: ignore[arg-type]
            state=parse_enum(
                OperationState, value.get("state", "ambiguous"), _OBSERVATION, "state"
            ),
            idempotency_support=(
                None
                if support is None
                else parse_enum(ToolIdempotency, support, _OBSERVATION, "idempotency_support")
            ),
            attempt=value.get("attempt"),
        )
        observation.validate()
        return observation


@dataclass(frozen=True, slots=True)
class ReconciliationError(OperationError):
    """The typed error a failure or abort decision records (it becomes the operation's)."""

    def validate(self) -> None:
        require_non_empty(self.code, "reconciliation error code")
        require_non_empty(self.message, "reconciliation error message")

    @classmethod
    def from_dict(cls, value: object) -> ReconciliationError:
        if not isinstance(value, Mapping) or not isinstance(value.get("retryable", False), bool):
            raise DurableError(_DECISION, "reconciliation error must be {code, message, retryable}")
        error = cls(value.get("code"), value.get("message"), value.get("retryable", False))  # type: ignore[arg-type]
        error.validate()
        return error


@dataclass(frozen=True, slots=True)
class ReconciliationDecision:
    """How one ambiguous operation is settled.

    ``defer`` leaves it ambiguous and the run suspended; ``retry`` runs it
    again under the same operation id and idempotency key (attempt + 1);
    ``replay_success`` records the receipt the outside world reports (a model
    ``response`` or a tool ``result``, exactly one); ``record_failure`` records
    a typed failure; ``abort`` ends the run as failed while keeping the
    ambiguity on record.
    """

    kind: ReconciliationDecisionKind
    response: Any = None
    result: Any = None
    error: ReconciliationError | None = None

    @classmethod
    def defer(cls) -> ReconciliationDecision:
        return cls(ReconciliationDecisionKind.DEFER)

    @classmethod
    def retry(cls) -> ReconciliationDecision:
        return cls(ReconciliationDecisionKind.RETRY)

    @classmethod
    def replay_response(cls, response: Any) -> ReconciliationDecision:
        return cls(ReconciliationDecisionKind.REPLAY_SUCCESS, response=response)

    @classmethod
    def replay_result(cls, result: Any) -> ReconciliationDecision:
        return cls(ReconciliationDecisionKind.REPLAY_SUCCESS, result=result)

    @classmethod
    def record_failure(cls, error: ReconciliationError) -> ReconciliationDecision:
        return cls(ReconciliationDecisionKind.RECORD_FAILURE, error=error)

    @classmethod
    def abort(cls, error: ReconciliationError) -> ReconciliationDecision:
        return cls(ReconciliationDecisionKind.ABORT, error=error)

    def validate(self) -> None:
        """The original's rules: a receipt XOR for replay, an error for failure/abort."""
        kind = self.kind
        if kind is ReconciliationDecisionKind.REPLAY_SUCCESS:
            if (self.response is None) == (self.result is None):
                raise DurableError(
                    _DECISION, "replay_success requires exactly one response or result"
                )
        elif kind in (ReconciliationDecisionKind.RECORD_FAILURE, ReconciliationDecisionKind.ABORT):
            if self.error is None:
                raise DurableError(_DECISION, "failure and abort decisions require a typed error")
            self.error.validate()
        elif self.response is not None or self.result is not None or self.error is not None:
            raise DurableError(
                _DECISION, "this reconciliation decision carries an unexpected payload"
            )
        if self.response is not None:
            validate_i_json(self.response, "reconciliation response")
        if self.result is not None:
            validate_i_json(self.result, "reconciliation result")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            **({"response": self.response} if self.response is not None else {}),
            **({"result": self.result} if self.result is not None else {}),
            **({"error": self.error.to_dict()} if self.error is not None else {}),
        }

    @classmethod
    def from_dict(cls, value: object) -> ReconciliationDecision:
        """Read ``{"kind", "response"?, "result"?, "error"?}`` and validate it."""
        if not isinstance(value, Mapping) or not {"kind", "response", "result", "error"}.issuperset(
            value
        ):
            raise DurableError(_DECISION, "decision must be {kind, response?, result?, error?}")
        error = value.get("error")
        decision = cls(
            kind=parse_enum(ReconciliationDecisionKind, value.get("kind"), _DECISION, "decision"),
            response=value.get("response"),
            result=value.get("result"),
            error=None if error is None else ReconciliationError.from_dict(error),
        )
        decision.validate()
        return decision


@runtime_checkable
class ReconciliationProvider(Protocol):
    """Settles ambiguous operations by asking the outside world (a ledger, an API).

    When a run has a provider it decides every ambiguous operation, before
    and instead of the configured policies. Return ``defer`` when the answer
    is not known yet: the run then suspends as ``reconciliation_required``.
    """

    async def reconcile(self, observation: ResumeObservation) -> ReconciliationDecision: ...


def policy_decision(
    kind: OperationKind,
    idempotency_support: ToolIdempotency | None,
    model_policy: AmbiguousModelPolicy,
    tool_policy: AmbiguousToolPolicy,
) -> ReconciliationDecision:
    """The decision the configured policies take when no provider is set.

    A model call is retried only under ``retry_with_duplicate_risk`` (the
    caller records that risk); a tool call only under
    ``retry_idempotent_only`` and only when it declared ``supported``.
    Everything else is deferred to an operator.
    """
    if kind is OperationKind.MODEL:
        if model_policy is AmbiguousModelPolicy.RETRY_WITH_DUPLICATE_RISK:
            return ReconciliationDecision.retry()
    elif (
        tool_policy is AmbiguousToolPolicy.RETRY_IDEMPOTENT_ONLY
        and idempotency_support is ToolIdempotency.SUPPORTED
    ):
        return ReconciliationDecision.retry()
    return ReconciliationDecision.defer()
