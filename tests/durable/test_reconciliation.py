from __future__ import annotations

import pytest

from agentflow.durable import (
    MODEL_RISK,
    AmbiguousModelPolicy,
    AmbiguousToolPolicy,
    DurableError,
    OperationKind,
    OperationState,
    ReconciliationDecision,
    ReconciliationDecisionKind,
    ReconciliationError,
    ResumeObservation,
    ToolIdempotency,
    policy_decision,
)

K = ReconciliationDecisionKind
ERROR = ReconciliationError("externally_rejected", "not committed")


def test_valid_decisions_round_trip() -> None:
    for decision in (
        ReconciliationDecision.defer(),
        ReconciliationDecision.retry(),
        ReconciliationDecision.replay_response({"content": "x"}),
        ReconciliationDecision.replay_result({"status": "success"}),
        ReconciliationDecision.record_failure(ERROR),
        ReconciliationDecision.abort(ERROR),
    ):
        decision.validate()
        assert ReconciliationDecision.from_dict(decision.to_dict()) == decision


@pytest.mark.parametrize(
    ("decision", "code"),
    [
        (ReconciliationDecision(K.REPLAY_SUCCESS), "checkpoint_reconciliation_decision_invalid"),
        (
            ReconciliationDecision(K.REPLAY_SUCCESS, response={}, result={}),
            "checkpoint_reconciliation_decision_invalid",
        ),
        (ReconciliationDecision(K.ABORT), "checkpoint_reconciliation_decision_invalid"),
        (
            ReconciliationDecision(K.RETRY, error=ERROR),
            "checkpoint_reconciliation_decision_invalid",
        ),
        (ReconciliationDecision(K.DEFER, result={}), "checkpoint_reconciliation_decision_invalid"),
        (
            ReconciliationDecision.record_failure(ReconciliationError(" ", "m")),
            "checkpoint_value_invalid",
        ),
        (
            ReconciliationDecision.replay_result({"n": float("inf")}),
            "checkpoint_definition_not_i_json",
        ),
    ],
)
def test_invalid_decisions(decision: ReconciliationDecision, code: str) -> None:
    with pytest.raises(DurableError) as caught:
        decision.validate()
    assert caught.value.code == code


def test_the_originals_lenient_corners_are_kept() -> None:
    ReconciliationDecision(K.REPLAY_SUCCESS, response={}, error=ERROR).validate()
    ReconciliationDecision(K.ABORT, response={"seen": 1}, error=ERROR).validate()


def test_observations() -> None:
    observation = ResumeObservation("op", OperationKind.MODEL, 2, MODEL_RISK)
    observation.validate()
    assert ResumeObservation.from_dict(observation.to_dict()) == observation
    wire = {k: v for k, v in observation.to_dict().items() if k != "state"}
    assert ResumeObservation.from_dict(wire).state is OperationState.AMBIGUOUS
    for changes, code in (
        ({"state": "started"}, "checkpoint_resume_observation_invalid"),
        ({"cycle_index": 0}, "checkpoint_integer_invalid"),
        ({"risk": ""}, "checkpoint_value_invalid"),
    ):
        with pytest.raises(DurableError) as caught:
            ResumeObservation.from_dict({**observation.to_dict(), **changes})
        assert caught.value.code == code


@pytest.mark.parametrize(
    ("kind", "support", "model", "tool", "expected"),
    [
        (OperationKind.MODEL, None, "require_reconciliation", "retry_idempotent_only", K.DEFER),
        (OperationKind.MODEL, None, "retry_with_duplicate_risk", "require_reconciliation", K.RETRY),
        (
            OperationKind.TOOL,
            "supported",
            "retry_with_duplicate_risk",
            "require_reconciliation",
            K.DEFER,
        ),
        (
            OperationKind.TOOL,
            "supported",
            "require_reconciliation",
            "retry_idempotent_only",
            K.RETRY,
        ),
        (OperationKind.TOOL, "unknown", "require_reconciliation", "retry_idempotent_only", K.DEFER),
        (
            OperationKind.TOOL,
            "unsupported",
            "require_reconciliation",
            "retry_idempotent_only",
            K.DEFER,
        ),
    ],
)
def test_policies_retry_only_what_is_safe_or_accepted(
    kind: OperationKind, support: str | None, model: str, tool: str, expected: K
) -> None:
    decision = policy_decision(
        kind,
        None if support is None else ToolIdempotency(support),
        AmbiguousModelPolicy(model),
        AmbiguousToolPolicy(tool),
    )
    assert decision.kind is expected
