from __future__ import annotations

import pytest

from agentflow.durable import (
    AmbiguousToolPolicy,
    CapabilityRef,
    CheckpointConfig,
    DurableError,
    ResumePolicy,
)

STORE = object()


def test_defaults_are_the_originals() -> None:
    config = CheckpointConfig(store=STORE)
    config.validate()
    assert config.resume_policy is ResumePolicy.NEW
    assert config.max_extension_state_bytes == 262_144
    assert "configured" in repr(config) and "object at" not in repr(config)


def test_wire_strings_become_enums_and_unknown_ones_fail() -> None:
    config = CheckpointConfig(
        store=STORE,
        key="k",
        ambiguous_tool_policy="retry_idempotent_only",  # type: ignore[arg-type]
    )
    assert config.ambiguous_tool_policy is AmbiguousToolPolicy.RETRY_IDEMPOTENT_ONLY
    for field in ("resume_policy", "ambiguous_model_policy", "ambiguous_tool_policy"):
        with pytest.raises(DurableError) as caught:
            CheckpointConfig(store=STORE, **{field: "retry_silently"})  # type: ignore[arg-type]
        assert caught.value.code == "checkpoint_policy_invalid"


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({}, "checkpoint_store_selection_invalid"),
        (
            {"store": STORE, "store_ref": CapabilityRef("s", "1")},
            "checkpoint_store_selection_invalid",
        ),
        ({"store_ref": CapabilityRef("s", " ")}, "checkpoint_capability_ref_invalid"),
        ({"store": STORE, "resume_policy": "require_existing"}, "checkpoint_key_required"),
        ({"store": STORE, "key": "\t"}, "checkpoint_key_invalid"),
        (
            {"store": STORE, "max_extension_state_bytes": 2**53},
            "checkpoint_extension_limit_invalid",
        ),
        ({"store": STORE, "max_extension_state_bytes": -1}, "checkpoint_extension_limit_invalid"),
        ({"store": STORE, "credential_slots": ["/b", "/a"]}, "checkpoint_credential_slots_invalid"),
        ({"store": STORE, "credential_slots": ["/a", "/a"]}, "checkpoint_credential_slots_invalid"),
        ({"store": STORE, "credential_slots": ["/a~9"]}, "checkpoint_credential_slots_invalid"),
        (
            {"store": STORE, "credential_slots": ["/\U0001f600", "/\ue000"]},
            None,
        ),
        (
            {"store": STORE, "required_extension_namespaces": ["a.b", "a.b"]},
            "checkpoint_extension_namespace_duplicate",
        ),
        (
            {"store": STORE, "required_extension_namespaces": ["b.c", "a.b"]},
            "checkpoint_extension_namespace_invalid",
        ),
        (
            {"store": STORE, "capability_refs": {"Bad": CapabilityRef("x", "1")}},
            "checkpoint_capability_ref_invalid",
        ),
    ],
)
def test_rules_and_their_codes(kwargs: dict[str, object], code: str | None) -> None:
    config = CheckpointConfig(**kwargs)  # type: ignore[arg-type]
    if code is None:
        config.validate()
        return
    with pytest.raises(DurableError) as caught:
        config.validate()
    assert caught.value.code == code


def test_first_broken_rule_decides() -> None:
    config = CheckpointConfig(
        resume_policy=ResumePolicy.RESUME_IF_PRESENT, max_extension_state_bytes=-5
    )
    with pytest.raises(DurableError) as caught:
        config.validate()
    assert caught.value.code == "checkpoint_store_selection_invalid"


def test_wire_form_round_trips() -> None:
    config = CheckpointConfig(
        store_ref=CapabilityRef("checkpoint.tenant", "1"),
        key="durable-run-42",
        resume_policy=ResumePolicy.REQUIRE_EXISTING,
        required_extension_namespaces=["com.example.audit"],
        capability_refs={"reconciliation_provider": CapabilityRef("reconcile.local", "1")},
    )
    again = CheckpointConfig.from_dict(config.to_dict())
    again.validate()
    assert again == config
    bad: object
    for bad in ([], {"key": "k", "surprise": 1}):
        with pytest.raises(DurableError) as caught:
            CheckpointConfig.from_dict(bad)
        assert caught.value.code == "checkpoint_config_invalid"
    local = CheckpointConfig.from_dict({"store": {"kind": "in_memory"}}, store=STORE)
    assert local.store is STORE
