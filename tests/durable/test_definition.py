from __future__ import annotations

import copy

import pytest

from agentflow.durable import (
    CREDENTIAL_REDACTED,
    DurableError,
    canonical_run_definition_bytes,
    live_credentials,
    normalize_run_definition,
    redact_run_definition,
    require_declared_credential_headers,
    run_definition_digest,
    validate_run_definition,
)
from agentflow.durable.testing import make_run_definition

SLOTS = ["/model/settings/extra_body/api_key", "/model/settings/extra_headers/authorization"]


def live(secret: str = "Bearer one") -> dict[str, object]:
    return make_run_definition(
        model={
            "backend": "fake",
            "model_id": "fake-1",
            "settings": {
                "extra_headers": {"Authorization": secret, "X-Feature": "v2"},
                "extra_body": {"api_key": f"key-{secret}"},
            },
        },
        tool_policy={"allowed_tools": ["write", "read", "write"], "disallowed_tools": []},
        extensions=[
            {"namespace": "com.example.z", "version": "1", "required": False},
            {"namespace": "com.example.a", "version": "1", "required": True},
        ],
    )


def test_rotating_a_credential_keeps_the_digest() -> None:
    first = normalize_run_definition(live("Bearer one"), SLOTS)
    second = normalize_run_definition(live("Bearer two"), SLOTS)
    assert first == second and run_definition_digest(first) == run_definition_digest(second)
    assert first["model"]["settings"]["extra_headers"] == {
        "authorization": CREDENTIAL_REDACTED,
        "x-feature": "v2",
    }
    assert first["tool_policy"]["allowed_tools"] == ["read", "write"]
    assert [e["namespace"] for e in first["extensions"]] == ["com.example.a", "com.example.z"]
    assert b"Bearer" not in canonical_run_definition_bytes(first)


def test_behaviour_changes_change_the_digest() -> None:
    base = run_definition_digest(normalize_run_definition(live(), SLOTS))
    changed = live()
    changed["model"]["settings"]["extra_headers"]["X-Feature"] = "v3"  # type: ignore[index]
    assert run_definition_digest(normalize_run_definition(changed, SLOTS)) != base


def test_normalizing_does_not_touch_the_input() -> None:
    definition = live()
    before = copy.deepcopy(definition)
    normalize_run_definition(definition, SLOTS)
    assert definition == before


def test_live_credentials_must_be_supplied() -> None:
    definition = live("Bearer z")
    definition["model"]["settings"]["extra_headers"] = {"authorization": "Bearer z"}  # type: ignore[index]
    assert live_credentials(definition, SLOTS) == {
        "/model/settings/extra_body/api_key": "key-Bearer z",
        "/model/settings/extra_headers/authorization": "Bearer z",
    }
    stored = normalize_run_definition(live(), SLOTS)
    with pytest.raises(DurableError) as caught:
        live_credentials(stored, SLOTS)
    assert caught.value.code == "checkpoint_credential_not_supplied"


def test_known_credential_headers_must_be_declared() -> None:
    definition = live()
    definition["model"]["settings"]["extra_headers"] = {"authorization": "x"}  # type: ignore[index]
    require_declared_credential_headers(definition, ["/model/settings/extra_headers/authorization"])
    with pytest.raises(DurableError) as caught:
        require_declared_credential_headers(definition, [])
    assert caught.value.code == "checkpoint_definition_unstable"


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda d: d.pop("tools"), "checkpoint_definition_invalid"),
        (lambda d: d.update(future=True), "checkpoint_definition_invalid"),
        (lambda d: d.update(schema_version="v9"), "checkpoint_definition_schema_unsupported"),
        (lambda d: d.update(root_input=1), "checkpoint_definition_invalid"),
        (lambda d: d.update(context_ref=[]), "checkpoint_definition_invalid"),
        (
            lambda d: d.update(credential_slots=["/root_input"]),
            "checkpoint_credential_value_not_redacted",
        ),
        (
            lambda d: d.update(credential_slots=["/missing"]),
            "checkpoint_credential_slot_unresolved",
        ),
        (lambda d: d.update(credential_slots=["/x~2"]), "checkpoint_credential_slots_invalid"),
        (
            lambda d: d.update(capability_refs={"p": {"id": "x"}}),
            "checkpoint_capability_ref_invalid",
        ),
        (
            lambda d: d.update(
                extensions=[{"namespace": "a.b", "version": "1", "required": "yes"}]
            ),
            "checkpoint_definition_invalid",
        ),
        (
            lambda d: d.update(tool_policy={"allowed_tools": ["b", "a"], "disallowed_tools": []}),
            "checkpoint_definition_invalid",
        ),
        (
            lambda d: d["checkpoint_policy"].update(max_extension_state_bytes=-1),
            "checkpoint_definition_not_i_json",
        ),
        (
            lambda d: d["model"].update(settings={"extra_headers": {"A": 1, "a": 2}}),
            "checkpoint_definition_header_collision",
        ),
        (lambda d: d["model"].update(settings={"seed": 2**60}), "checkpoint_definition_not_i_json"),
    ],
)
def test_invalid_definitions(mutate: object, code: str) -> None:
    definition = make_run_definition()
    mutate(definition)  # type: ignore[operator]
    with pytest.raises(DurableError) as caught:
        validate_run_definition(definition)
    assert caught.value.code == code


def test_redaction_refuses_unordered_or_missing_slots() -> None:
    with pytest.raises(DurableError) as unordered:
        redact_run_definition(live(), list(reversed(SLOTS)))
    with pytest.raises(DurableError) as missing:
        redact_run_definition(live(), ["/model/nothing"])
    assert unordered.value.code == "checkpoint_credential_slots_invalid"
    assert missing.value.code == "checkpoint_credential_slot_unresolved"
