"""agentflow.durable against the Rust original's contract fixtures (vv-agent-contract v0.5.5).

Read from a scratch copy made at test time (see ``vv_agent_contract``): the
v1 codec, the v1-to-v2 migration, the v2 codec, the checkpoint config, the
run definition, the operation journal and the event digests. Each case is
one test, named after the fixture case it runs.
"""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

import pytest

from agentflow.checkpoint.memory import MemoryCheckpointer
from agentflow.durable import (
    LEGACY_NON_TERMINAL,
    Admission,
    CapabilityRef,
    CheckpointConfig,
    CheckpointStatus,
    CheckpointV1,
    DurableCheckpoint,
    DurableError,
    ExtensionStateEntry,
    OperationJournalEntry,
    ReconciliationDecision,
    ResumeObservation,
    ResumePolicy,
    admission,
    canonical_json,
    decode_checkpoint,
    event_payload_digest,
    migrate_v1,
    normalize_run_definition,
    operation_request_digest,
    require_stable_producer,
    resolve_json_pointer,
    restore_extensions,
    run_definition_digest,
    utf16_sort_key,
    validate_extension_state_size,
    validate_run_definition,
)
from agentflow.runtime import Durability
from tests.contracts.checkpoint_mutations import mutate, set_at
from tests.contracts.vv_agent_contract import load_contract

CONTRACT = load_contract()
V1 = CONTRACT["checkpoint_codec_v1.json"]
V2 = CONTRACT["checkpoint_codec_v2.json"]
CONFIG = CONTRACT["checkpoint_config_v1.json"]
DEFINITION = CONTRACT["run_definition_v1.json"]
JOURNAL = CONTRACT["operation_journal_v1.json"]
STORE = CONTRACT["checkpoint_store_v2.json"]
_CODE = re.compile(r"[a-z0-9]+(_[a-z0-9]+)+")
#: The original's codes for the v2 invalid cases whose fixture names a message, not a code.
ORIGINAL_CODES = {
    "blank_checkpoint_key": "checkpoint_key_invalid",
    "bad_definition_digest": "checkpoint_definition_digest_invalid",
    "zero_resume_attempt": "checkpoint_resume_attempt_invalid",
    "partial_claim": "checkpoint_claim_invalid",
    "claimed_cycle_not_next": "checkpoint_claim_invalid",
    "terminal_with_claim": "checkpoint_status_invalid",
    "journal_cycle_not_active": "checkpoint_journal_cycle_invalid",
}
#: The original's slot names of the behaviour fields the producer cases name.
BEHAVIOR_SLOTS = {
    "tool_policy.predicate": "tool_policy.predicate",
    "runtime_hooks[0]": "runtime_hook:0",
}


def named(cases: list[dict[str, Any]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("case", cases, ids=[case["name"] for case in cases])


def code_of(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(DurableError) as caught:
        call(*args, **kwargs)
    return caught.value.code


def golden_definition(name: str) -> dict[str, Any]:
    case = next(c for c in DEFINITION["golden_cases"] if c["name"] == name)
    return copy.deepcopy(case["definition"])


def v2_case(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(c for c in V2["valid_cases"] if c["name"] == name)["payload"])


class Ledger:
    async def reconcile(self, observation: ResumeObservation) -> ReconciliationDecision:
        return ReconciliationDecision.defer()


# -- checkpoint_codec_v1 ------------------------------------------------------------


def test_v1_canonical_round_trips_unchanged() -> None:
    record = decode_checkpoint(V1["canonical"])
    assert isinstance(record, CheckpointV1)
    assert record.to_dict() == V1["canonical"]


@named(V1["valid_cases"])
def test_v1_valid(case: dict[str, Any]) -> None:
    record = decode_checkpoint(case["payload"])
    assert isinstance(record, CheckpointV1) and record.to_dict() == case["payload"]


@named(V1["invalid_cases"])
def test_v1_invalid(case: dict[str, Any]) -> None:
    assert code_of(CheckpointV1.from_dict, case["payload"]) == "checkpoint_v1_invalid"


def test_v1_claim_contract() -> None:
    rules = V1["claim_contract"]
    base = {**V1["valid_cases"][0]["payload"], "cycle_index": rules["initial_cycle"]}
    claim = {"claim_token": "c", "lease_expires_at_ms": 1}
    assert CheckpointV1.from_dict({**base, **claim, "claimed_cycle": rules["accepted_cycle"]})
    skipped = {**base, **claim, "claimed_cycle": rules["skipped_cycle"]}
    assert code_of(CheckpointV1.from_dict, skipped) == "checkpoint_v1_invalid"


# -- checkpoint_codec_v2: migration cases --------------------------------------------


def migration(name: str) -> dict[str, Any]:
    return copy.deepcopy(next(c for c in V2["migration_cases"] if c["name"] == name))


def test_migration_checkpoint_0_5_0_v2_requires_explicit_definition_migration() -> None:
    case = migration("checkpoint_0_5_0_v2_requires_explicit_definition_migration")
    expected = case["automatic_resume"]
    assert not expected["allowed"]
    assert code_of(decode_checkpoint, case["source_payload"]) == expected["error_code"]
    target = case["explicit_host_migration"]
    attested = golden_definition("minimal")
    assert run_definition_digest(attested) == target["target_run_definition_digest"]


def test_migration_absent_discriminator_reads_v1() -> None:
    case = migration("absent_discriminator_reads_v1")
    decoded = decode_checkpoint(case["source"])
    assert case["expected_decoder"] == "v1" and isinstance(decoded, CheckpointV1)
    assert not case["automatic_v2_migration"] and not isinstance(decoded, DurableCheckpoint)


def test_migration_terminal_v1_explicit_migration() -> None:
    case = migration("terminal_v1_explicit_migration")
    expected = case["expected"]
    definition = golden_definition("minimal")
    migrated = migrate_v1(case["source"], key=case["target_key"], run_definition=definition)
    record = migrated.require()
    assert migrated.allowed is expected["allowed"]
    assert migrated.status.value == expected["status"]
    assert record.checkpoint_key == case["target_key"]
    replayed = admission(
        ResumePolicy.REQUIRE_EXISTING,
        DurableCheckpoint.from_dict(record.to_dict()),
        run_definition=definition,
        run_definition_digest=record.run_definition_digest,
        now_ms=0,
    )
    assert (replayed is Admission.REPLAY_TERMINAL) is expected["terminal_replayed"]
    assert migrated.terminal_result == case["source"]["terminal_result"]
    calls = len(record.model_call_journal), len(record.tool_journal)
    assert calls == (expected["model_calls"], expected["tool_calls"])


def test_migration_running_v1_requires_reconciliation() -> None:
    case = migration("running_v1_requires_reconciliation")
    expected = case["expected"]
    outcome = migrate_v1(case["source"], key="k", run_definition=golden_definition("minimal"))
    assert outcome.allowed is expected["allowed"] and outcome.record is None
    assert (outcome.status.value, outcome.reason) == (expected["status"], expected["reason"])
    assert outcome.reason == LEGACY_NON_TERMINAL


def test_migration_active_v1_claim_cannot_migrate() -> None:
    case = migration("active_v1_claim_cannot_migrate")
    assert not case["expected"]["allowed"]
    definition = golden_definition("minimal")
    refused = code_of(migrate_v1, case["source"], key="k", run_definition=definition)
    assert refused == case["expected"]["error"]


# -- checkpoint_codec_v2 ------------------------------------------------------------


def test_v2_canonical_checkpoint_round_trips_with_unknown_fields() -> None:
    record = DurableCheckpoint.from_dict(V2["canonical_checkpoint"])
    assert record.to_dict() == V2["canonical_checkpoint"]
    assert sorted(V2["required_fields"]) == sorted(
        name for name in record.to_dict() if name not in record.unknown_fields
    )


@named(V2["valid_cases"])
def test_v2_valid(case: dict[str, Any]) -> None:
    record = decode_checkpoint(case["payload"])
    assert isinstance(record, DurableCheckpoint) and record.to_dict() == case["payload"]


@named(V2["invalid_cases"])
def test_v2_invalid(case: dict[str, Any]) -> None:
    if "registered_extensions" in case:
        record = DurableCheckpoint.from_dict(case["payload"])
        code = code_of(restore_extensions, case["registered_extensions"], record.extension_state)
    else:
        code = code_of(DurableCheckpoint.from_dict, case["payload"])
    error = case["error"]
    assert code == (error if _CODE.fullmatch(error) else ORIGINAL_CODES[case["name"]])


@named(V2["status_cases"])
def test_v2_status(case: dict[str, Any]) -> None:
    if case.get("valid"):
        assert DurableCheckpoint.from_dict(v2_case(case["valid_case"]))
    elif "mutation" in case:
        payload = mutate(v2_case(case["base_valid_case"]), case["mutation"])
        assert code_of(DurableCheckpoint.from_dict, payload) == case["error_code"]
    else:  # an operator's abort of the suspended run keeps the evidence
        suspended = DurableCheckpoint.from_dict(v2_case(case["source_valid_case"]))
        ambiguous = suspended.tool_journal[0]
        observation = ResumeObservation(
            ambiguous.operation_id, ambiguous.kind, ambiguous.cycle_index, risk="unknown"
        )
        expected = case["expected"]
        result = {
            "status": expected["status"],
            "completion_reason": expected["completion_reason"],
            "error_code": expected["terminal_error_code"],
            "resume_observation": observation.to_dict(),
        }
        payload = {**suspended.to_dict(), "status": "failed", "terminal_result": result}
        aborted = DurableCheckpoint.from_dict(payload)
        assert aborted.is_operator_abort_terminal() and aborted.status is CheckpointStatus.FAILED
        assert bool(aborted.tool_journal) is expected["ambiguous_journal_preserved"]
        assert (aborted.terminal_result or {})["resume_observation"] == observation.to_dict()


@named(V2["run_definition_schema_cases"] + V2["run_definition_cases"])
def test_v2_run_definition(case: dict[str, Any]) -> None:
    if case.get("valid"):
        record = DurableCheckpoint.from_dict(v2_case(case["valid_case"]))
        assert record.run_definition_digest == case["expected_digest"]
        return
    payload = mutate(v2_case(case["base_valid_case"]), case["mutation"])
    code = case.get("error_code") or case["expected_error_code"]
    assert code_of(DurableCheckpoint.from_dict, payload) == code


def test_v2_extension_canonicalization_vectors() -> None:
    for vector in V2["extension_limits"]["canonicalization_vectors"]:
        data = canonical_json(vector["entry"])
        assert base64.b64encode(data).decode() == vector["canonical_json_base64"]
        assert len(data) == vector["canonical_json_utf8_bytes"]
        assert ExtensionStateEntry.from_dict(vector["entry"]).to_dict() == vector["entry"]


def _state(generation: dict[str, Any], repetitions: int | None = None) -> str:
    if generation.get("state_type") == "string_segments":
        return "".join(s["character"] * s["repetitions"] for s in generation["state_segments"])
    count = generation["state_utf8_repetitions"] if repetitions is None else repetitions
    return str(generation["state_character"]) * count


@named(V2["extension_limits"]["generated_boundary_cases"])
def test_v2_extension_limits(case: dict[str, Any]) -> None:
    if "entry_generation" in case:
        generation = case["entry_generation"]
        entries = {"com.example.limit": ExtensionStateEntry("1", False, _state(generation))}
    else:
        generation = case["entries_generation"]
        entries = {
            f"com.example.limit{i}": ExtensionStateEntry("1", False, _state(generation, count))
            for i, count in enumerate(generation["state_utf8_repetitions"])
        }
    limit = V2["extension_limits"]["default_total_max_utf8_bytes"]
    if case["valid"]:
        total = validate_extension_state_size(entries, limit)
        expected = case.get(
            "canonical_total_entries_utf8_bytes", case.get("canonical_entry_utf8_bytes")
        )
        assert total == expected
    else:
        assert code_of(validate_extension_state_size, entries, limit) == case["error_code"]


# -- checkpoint_config_v1 -----------------------------------------------------------


@named(CONFIG["valid_cases"])
def test_config_valid(case: dict[str, Any]) -> None:
    if case["config"] is None:  # disabled: nothing to validate
        return
    config = CheckpointConfig.from_dict(case["config"], store=object())
    config.validate()
    assert config.resume_policy.as_str() == case["config"]["resume_policy"]


@named(CONFIG["invalid_cases"])
def test_config_invalid(case: dict[str, Any]) -> None:
    def build_and_validate() -> None:
        CheckpointConfig.from_dict(case["config"], store=object()).validate()

    assert code_of(build_and_validate) == case["error_code"]


def test_config_defaults() -> None:
    defaults = {**CONFIG["defaults"]}
    assert defaults.pop("checkpoint_config") is None
    config = CheckpointConfig.new(object()).to_dict()
    assert {name: config[name] for name in defaults} == defaults


def runner_case(name: str) -> dict[str, Any]:
    return dict(next(c for c in CONFIG["runner_cases"] if c["name"] == name))


def test_config_runner_local_reconciliation_provider_requires_explicit_stable_ref() -> None:
    case = runner_case("local_reconciliation_provider_requires_explicit_stable_ref")
    assert case["configured_capabilities"] == ["reconciliation_provider"]
    unpinned = Durability(reconciliation=Ledger())
    assert code_of(unpinned.definition, "agent") == case["expected"]["failure_code"]
    pinned = Durability(
        reconciliation=Ledger(),
        capability_refs={"reconciliation_provider": CapabilityRef("reconcile.local", "1")},
    )
    assert pinned.definition("agent").digest


def test_config_runner_handoff_is_rejected_before_checkpoint_side_effects() -> None:
    case = runner_case("handoff_is_rejected_before_checkpoint_side_effects")
    handoffs = case["agent"]["handoff_count"]
    refused = code_of(require_stable_producer, [], {}, handoffs=handoffs)
    assert refused == case["expected"]["failure_code"] == CONFIG["run_scope"]["handoff_error_code"]


# -- run_definition_v1 ------------------------------------------------------------------


@named(DEFINITION["golden_cases"])
def test_definition_golden(case: dict[str, Any]) -> None:
    data = canonical_json(case["definition"])
    assert base64.b64encode(data).decode() == case["canonical_json_base64"]
    assert len(data) == case["canonical_json_utf8_bytes"]
    assert run_definition_digest(case["definition"]) == case["sha256"]


def _generated_definition_code(generated: dict[str, Any]) -> str:
    definition = golden_definition("full_unicode_float_and_capabilities")
    if "extra_headers_before_normalization" in generated:
        headers = generated["extra_headers_before_normalization"]
        set_at(definition, "/model/settings/extra_headers", headers)
        return code_of(normalize_run_definition, definition, [])
    if "behavior_field" in generated:
        slot = BEHAVIOR_SLOTS[generated["behavior_field"]]
        return code_of(require_stable_producer, [slot], {})
    if "run_metadata" in generated:
        return code_of(Durability(metadata=generated["run_metadata"]).definition, "agent")
    value = float("nan") if generated.get("number_kind") == "NaN" else generated["value"]
    set_at(definition, generated["json_pointer"], value)
    return code_of(run_definition_digest, definition)


@named(DEFINITION["invalid_cases"])
def test_definition_invalid(case: dict[str, Any]) -> None:
    if "generated_input" in case:
        code = _generated_definition_code(case["generated_input"])
    else:
        definition = mutate(golden_definition(case["base_golden_case"]), case["mutation"])
        code = code_of(validate_run_definition, definition)
    assert code == case["error_code"]


@named(DEFINITION["producer_cases"])
def test_definition_producer(case: dict[str, Any]) -> None:
    generated = case.get("generated_input")
    if generated is not None and "unsorted" in generated:
        assert sorted(generated["unsorted"], key=utf16_sort_key) == generated["expected_sorted"]
        return
    if generated is not None:
        found = resolve_json_pointer(generated["object"], generated["pointer"])
        assert found == generated["expected_value"]
        return
    base = golden_definition(case["base_golden_case"])
    changed = normalize_run_definition(mutate(base, case["mutation"]), base["credential_slots"])
    same = run_definition_digest(changed) == run_definition_digest(base)
    assert same is (case["expected_digest_relation"] == "equal")


# -- operation_journal_v1 and event digests ---------------------------------------------


@named(JOURNAL["request_digest"]["golden_cases"])
def test_journal_request_digest(case: dict[str, Any]) -> None:
    data = canonical_json(case["request"])
    assert base64.b64encode(data).decode() == case["canonical_json_base64"]
    assert operation_request_digest(case["request"]) == case["sha256"]
    kind = case["request"]["kind"]
    assert operation_request_digest(kind, case["request"]) == case["sha256"]


@named(JOURNAL["valid_entries"])
def test_journal_valid(case: dict[str, Any]) -> None:
    entry = OperationJournalEntry.from_dict(case["entry"])
    assert entry.to_dict() == case["entry"]
    goldens = {c["name"]: c["sha256"] for c in JOURNAL["request_digest"]["golden_cases"]}
    if "request_golden_case" in case:
        assert entry.request_digest == goldens[case["request_golden_case"]]


@named(JOURNAL["invalid_entries"])
def test_journal_invalid(case: dict[str, Any]) -> None:
    assert code_of(OperationJournalEntry.from_dict, case["entry"]) == case["error_code"]


@named(STORE["event_payload_digest"]["golden_cases"])
def test_event_payload_digest(case: dict[str, Any]) -> None:
    data = canonical_json(case["event"])
    assert base64.b64encode(data).decode() == case["canonical_json_base64"]
    assert len(data) == case["canonical_json_utf8_bytes"]
    assert event_payload_digest(case["event"]) == case["sha256"]


@named([c for c in STORE["outbox_cases"] if "call" in c])
async def test_outbox_append_once(case: dict[str, Any]) -> None:
    call, expected = case["call"], case["expected"]
    async with MemoryCheckpointer() as store:
        first = None
        if case["existing"] is not None:
            existing = case["existing"]
            first = await store.append_once(
                existing["event_id"], existing["payload_digest"], call["event"]
            )
        if "error" in expected:
            with pytest.raises(DurableError) as caught:
                await store.append_once(call["event_id"], call["payload_digest"], call["event"])
            assert caught.value.code == expected["error"]
            return
        result = await store.append_once(call["event_id"], call["payload_digest"], call["event"])
    assert result.inserted is expected["inserted"]
    if first is not None:
        assert result.cursor == first.cursor  # the first acceptance's cursor
