from __future__ import annotations

from dataclasses import replace

import pytest

from agentflow.durable import (
    Admission,
    CheckpointStatus,
    DurableError,
    ResumePolicy,
    admission,
)
from agentflow.durable.testing import make_record, make_run_definition

DEFINITION = make_run_definition()
RECORD = make_record()


def decide(policy: ResumePolicy, existing: object, now_ms: int = 1_000) -> Admission:
    return admission(
        policy,
        existing,  # type: ignore[arg-type]
        run_definition=DEFINITION,
        run_definition_digest=RECORD.run_definition_digest,
        now_ms=now_ms,
    )


def code(policy: ResumePolicy, existing: object, now_ms: int = 1_000) -> str:
    with pytest.raises(DurableError) as caught:
        decide(policy, existing, now_ms)
    return caught.value.code


def test_absent_records() -> None:
    assert decide(ResumePolicy.NEW, None) is Admission.CREATE
    assert decide(ResumePolicy.RESUME_IF_PRESENT, None) is Admission.CREATE
    assert code(ResumePolicy.REQUIRE_EXISTING, None) == "checkpoint_not_found"


def test_existing_records() -> None:
    assert code(ResumePolicy.NEW, RECORD) == "checkpoint_already_exists"
    for policy in (ResumePolicy.RESUME_IF_PRESENT, ResumePolicy.REQUIRE_EXISTING):
        assert decide(policy, RECORD) is Admission.RESUME
    done = replace(
        RECORD, status=CheckpointStatus.COMPLETED, terminal_result={"status": "completed"}
    )
    assert decide(ResumePolicy.REQUIRE_EXISTING, done) is Admission.REPLAY_TERMINAL


def test_definition_and_live_lease_are_checked() -> None:
    other = make_record(run_definition=make_run_definition(root_input="another input"))
    assert code(ResumePolicy.RESUME_IF_PRESENT, other) == "checkpoint_definition_mismatch"
    held = replace(RECORD, claim_token="t", claimed_cycle=1, lease_expires_at_ms=2_000)
    assert code(ResumePolicy.RESUME_IF_PRESENT, held, now_ms=1_999) == "checkpoint_claim_active"
    assert decide(ResumePolicy.RESUME_IF_PRESENT, held, now_ms=2_000) is Admission.RESUME
