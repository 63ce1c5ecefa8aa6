"""v1 records: the codec's rules, the discriminator, and the explicit migration to v2."""

from __future__ import annotations

from typing import Any

import pytest

from agentflow.durable import (
    LEGACY_NON_TERMINAL,
    LEGACY_WAIT_USER,
    Admission,
    CheckpointStatus,
    CheckpointV1,
    DurableCheckpoint,
    DurableError,
    ResumePolicy,
    admission,
    decode_checkpoint,
    migrate_v1,
)
from agentflow.durable.testing.harness import make_run_definition


def v1(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task_id": "task-1",
        "cycle_index": 1,
        "status": "running",
        "messages": [{"role": "user", "content": "hello"}],
        "cycles": [],
        "shared_state": {},
    }
    return {**base, **fields}


def terminal(status: str = "completed") -> dict[str, Any]:
    result = {"status": status, "messages": [], "final_answer": "done", "shared_state": {}}
    return v1(status=status, revision=4, terminal_result=result)


def refusal(payload: object) -> str:
    with pytest.raises(DurableError) as caught:
        CheckpointV1.from_dict(payload)
    return caught.value.code


def test_a_v1_record_reads_back_as_the_original_writes_it() -> None:
    payload = v1(
        revision=3,
        claim_token="claim-3",
        claimed_cycle=2,
        lease_expires_at_ms=1_000,
        budget_usage={
            "cycles": 1,
            "total_tokens": None,
            "tool_calls": 2,
            "tool_calls_by_name": {"search": 2},
            "elapsed_ms": 5,
            "host_cost": {"unit": "credits", "currency": None, "amount_microunits": 80},
            "unavailable_dimensions": [],
        },
    )
    record = CheckpointV1.from_dict(payload)
    assert (record.status, record.cycle_index, record.has_claim) == (
        CheckpointStatus.RUNNING,
        1,
        True,
    )
    assert record.to_dict() == payload
    assert (
        CheckpointV1.from_json(
            b'{"task_id":"t","cycle_index":0,"status":"pending",'
            b'"messages":[],"cycles":[],"shared_state":{}}'
        ).revision
        == 0
    )
    assert "revision" not in CheckpointV1.from_dict(v1()).to_dict()  # zero is not written


@pytest.mark.parametrize(
    "payload",
    [
        [],
        v1(task_id=" \u3000"),  # blank by Unicode White_Space, as Rust trims
        v1(cycle_index=True),
        v1(cycle_index=2**32),
        v1(cycle_index=1.0),
        v1(status="reconciling"),
        v1(messages={}),
        v1(messages=[{"role": "robot", "content": "x"}]),
        v1(messages=[{"role": "user"}]),
        v1(messages=[{"role": "user", "content": "x", "tool_calls": {}}]),
        v1(messages=[{"role": "user", "content": "x", "name": 3}]),
        v1(cycles=[{"index": 1}]),
        v1(shared_state=[]),
        v1(revision=None),
        v1(revision=2**64),
        v1(claim_token=""),
        v1(claim_token="c"),  # a partial claim
        v1(claim_token="c", claimed_cycle=3, lease_expires_at_ms=1),  # not the next cycle
        v1(terminal_result="done", status="completed"),
        {**terminal(), "status": "failed"},  # the result says completed
        {**terminal(), "claim_token": "c", "claimed_cycle": 2, "lease_expires_at_ms": 1},
        v1(budget_usage=[]),
        v1(
            budget_usage={
                "cycles": 0,
                "total_tokens": 2**53,
                "tool_calls": 0,
                "tool_calls_by_name": {},
                "elapsed_ms": 0,
                "unavailable_dimensions": [],
            }
        ),
    ],
)
def test_what_the_codec_refuses_is_checkpoint_v1_invalid(payload: object) -> None:
    assert refusal(payload) == "checkpoint_v1_invalid"


def test_the_discriminator_decides_the_version() -> None:
    assert isinstance(decode_checkpoint(v1()), CheckpointV1)
    codes = []
    payload: object
    for payload in ([], {"schema_version": "vv-agent.checkpoint.v3"}, {"schema_version": None}):
        with pytest.raises(DurableError) as caught:
            decode_checkpoint(payload)
        codes.append(caught.value.code)
    assert codes == [
        "checkpoint_payload_invalid",
        "checkpoint_schema_unsupported",
        "checkpoint_schema_unsupported",
    ]


def test_a_finished_v1_record_migrates_and_its_result_replays() -> None:
    definition = make_run_definition()
    migration = migrate_v1(terminal(), key="migrated", run_definition=definition)
    record = migration.require()
    assert migration.allowed and migration.status is CheckpointStatus.COMPLETED
    assert (record.checkpoint_key, record.root_run_id, record.trace_id) == ("migrated",) * 3
    assert (record.revision, record.resume_attempt, record.cycle_index) == (4, 1, 1)
    assert not record.model_call_journal and not record.tool_journal and record.claim_token is None
    again = DurableCheckpoint.from_dict(record.to_dict())  # a valid v2 record on the wire
    assert again.terminal_result == migration.terminal_result == terminal()["terminal_result"]
    decided = admission(
        ResumePolicy.RESUME_IF_PRESENT,
        again,
        run_definition=definition,
        run_definition_digest=again.run_definition_digest,
        now_ms=0,
    )
    assert decided is Admission.REPLAY_TERMINAL  # no claim, no call: the result is replayed
    named = migrate_v1(terminal("failed"), key="k", run_definition=definition, trace_id="t")
    assert (named.status, named.require().trace_id) == (CheckpointStatus.FAILED, "t")


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (v1(), LEGACY_NON_TERMINAL),
        (v1(status="pending", cycle_index=0), LEGACY_NON_TERMINAL),
        (v1(status="completed"), LEGACY_NON_TERMINAL),  # no result: never finished durably
        (terminal("wait_user"), LEGACY_WAIT_USER),
    ],
)
def test_an_unfinished_v1_record_needs_reconciliation(payload: dict[str, Any], reason: str) -> None:
    definition = make_run_definition()
    migration = migrate_v1(payload, key="k", run_definition=definition)
    assert not migration.allowed and migration.record is None
    assert (migration.status, migration.reason) == (
        CheckpointStatus.RECONCILIATION_REQUIRED,
        reason,
    )
    with pytest.raises(DurableError) as caught:
        migration.require()
    assert caught.value.code == "checkpoint_migration_requires_reconciliation"


def test_migration_refusals_carry_their_codes() -> None:
    definition = make_run_definition()
    claimed = v1(claim_token="c", claimed_cycle=2, lease_expires_at_ms=99)
    bad_result = terminal()
    bad_result["terminal_result"]["final_answer"] = float("nan")
    cases: list[tuple[dict[str, Any], dict[str, Any], str]] = [
        (claimed, definition, "checkpoint_migration_active_claim"),
        (bad_result, definition, "checkpoint_migration_invalid"),
        (terminal(), {**definition, "future": True}, "checkpoint_definition_invalid"),
        ({"cycle_index": 0}, definition, "checkpoint_v1_invalid"),
    ]
    for payload, attested, code in cases:
        with pytest.raises(DurableError) as caught:
            migrate_v1(payload, key="k", run_definition=attested)
        assert caught.value.code == code
    record = CheckpointV1.from_dict(terminal())
    assert migrate_v1(record, key="k", run_definition=definition).allowed  # decoded input too
