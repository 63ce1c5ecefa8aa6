"""The run definition: the closed, credential-redacted description a digest pins.

A record embeds the definition it was created from beside its digest; a
resume rebuilds the definition from the live configuration and must arrive
at the same bytes, or the run is refused with ``checkpoint_definition_mismatch``
before any external call.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow.durable.errors import DurableError
from agentflow.durable.run.credentials import redact_run_definition, validate_credential_slots
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER, canonical_json, utf16_sort_key
from agentflow.durable.wire.digests import sha256_canonical
from agentflow.durable.wire.validators import validate_capability_slot, validate_extension_namespace

__all__ = [
    "RUN_DEFINITION_FIELDS",
    "RUN_DEFINITION_SCHEMA",
    "canonical_run_definition_bytes",
    "normalize_run_definition",
    "run_definition_digest",
    "validate_run_definition",
]

RUN_DEFINITION_SCHEMA = "vv-agent.run-definition.v1"
#: The closed set of top-level members, in the original's order.
RUN_DEFINITION_FIELDS = (
    "schema_version",
    "agent",
    "root_input",
    "compiled_prompt",
    "initial_messages",
    "initial_shared_state",
    "run_metadata",
    "context_ref",
    "model",
    "credential_slots",
    "runtime_controls",
    "tools",
    "tool_policy",
    "checkpoint_policy",
    "budget_limits",
    "output_schema",
    "workspace_ref",
    "session_ref",
    "extensions",
    "capability_refs",
)
_INVALID = "checkpoint_definition_invalid"
_OPTIONAL_OBJECTS = (
    "context_ref",
    "budget_limits",
    "output_schema",
    "workspace_ref",
    "session_ref",
)


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DurableError(_INVALID, f"{what} must be an object")
    return value


def _array(value: Any, what: str) -> Sequence[Any]:
    if not isinstance(value, list | tuple):
        raise DurableError(_INVALID, f"{what} must be an array")
    return value


def _string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise DurableError(_INVALID, f"{what} must be a string")
    return value


_SHAPES = (
    ("agent", _object),
    ("root_input", _string),
    ("compiled_prompt", _string),
    ("initial_messages", _array),
    ("initial_shared_state", _object),
    ("run_metadata", _object),
    ("model", _object),
    ("runtime_controls", _object),
    ("tools", _array),
    ("tool_policy", _object),
    ("checkpoint_policy", _object),
    ("capability_refs", _object),
)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _validate_ref(value: Any, what: str) -> None:
    reference = _object(value, what)
    if set(reference) != {"id", "version"}:
        raise DurableError(
            "checkpoint_capability_ref_invalid", f"{what} must contain exactly id and version"
        )
    _string(reference["id"], f"{what}.id")
    _string(reference["version"], f"{what}.version")


def validate_run_definition(definition: object) -> None:
    """Raise the original's code for the first rule ``definition`` breaks."""
    canonical_json(definition, what="run_definition")
    document = _object(definition, "run_definition")
    if set(document) != set(RUN_DEFINITION_FIELDS):
        raise DurableError(_INVALID, "run_definition has missing or unknown top-level fields")
    if document["schema_version"] != RUN_DEFINITION_SCHEMA:
        raise DurableError(
            "checkpoint_definition_schema_unsupported",
            "run_definition schema_version is unsupported",
        )
    for name, shape in _SHAPES:
        shape(document[name], f"run_definition.{name}")
    for name in _OPTIONAL_OBJECTS:
        if document[name] is not None and not isinstance(document[name], Mapping):
            raise DurableError(_INVALID, f"run_definition.{name} must be an object or null")
    validate_credential_slots(
        document, _array(document["credential_slots"], "run_definition.credential_slots")
    )
    for slot, reference in document["capability_refs"].items():
        validate_capability_slot(slot)
        _validate_ref(reference, f"run_definition.capability_refs.{slot}")
    _validate_extensions(_array(document["extensions"], "run_definition.extensions"))
    _validate_tool_policy(document["tool_policy"])
    _validate_checkpoint_policy(document["checkpoint_policy"])
    headers = _extra_headers(document)
    if headers is not None and len({name.translate(_ASCII_LOWER) for name in headers}) != len(
        headers
    ):
        raise DurableError(
            "checkpoint_definition_header_collision", "header names collide after ASCII lowercasing"
        )


def _validate_extensions(extensions: Sequence[Any]) -> None:
    previous: str | None = None
    for extension in extensions:
        item = _object(extension, "run_definition extension")
        namespace = validate_extension_namespace(
            _string(item.get("namespace"), "extension namespace")
        )
        _string(item.get("version"), "extension version")
        if not isinstance(item.get("required"), bool):
            raise DurableError(_INVALID, "extension required must be boolean")
        if previous is not None and previous >= namespace:
            raise DurableError(_INVALID, "extensions must be sorted and unique by namespace")
        previous = namespace


def _validate_sorted_names(value: Any, what: str) -> None:
    previous: bytes | None = None
    for item in _array(value, what):
        current = utf16_sort_key(_string(item, what))
        if previous is not None and previous >= current:
            raise DurableError(_INVALID, f"{what} must be sorted and unique")
        previous = current


def _validate_tool_policy(policy: Mapping[str, Any]) -> None:
    if policy.get("allowed_tools") is not None:
        _validate_sorted_names(policy["allowed_tools"], "tool_policy.allowed_tools")
    _validate_sorted_names(policy.get("disallowed_tools"), "tool_policy.disallowed_tools")
    if policy.get("predicate_ref") is not None:
        _validate_ref(policy["predicate_ref"], "tool_policy.predicate_ref")


def _validate_checkpoint_policy(policy: Mapping[str, Any]) -> None:
    for name in ("ambiguous_model_policy", "ambiguous_tool_policy"):
        _string(policy.get(name), f"checkpoint_policy.{name}")
    if "max_extension_state_bytes" not in policy:
        raise DurableError(_INVALID, "checkpoint_policy.max_extension_state_bytes is required")
    limit = policy["max_extension_state_bytes"]
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_WIRE_INTEGER:
        raise DurableError(
            "checkpoint_definition_not_i_json", "max_extension_state_bytes must be a safe integer"
        )


def _extra_headers(definition: Mapping[str, Any]) -> Mapping[str, Any] | None:
    model = definition.get("model")
    settings = model.get("settings") if isinstance(model, Mapping) else None
    headers = settings.get("extra_headers") if isinstance(settings, Mapping) else None
    return headers if isinstance(headers, Mapping) else None


def run_definition_digest(definition: object) -> str:
    """Validate ``definition`` and return the hex SHA-256 of its canonical bytes."""
    validate_run_definition(definition)
    return sha256_canonical(definition, "run_definition")


def canonical_run_definition_bytes(definition: object) -> bytes:
    """Validate ``definition`` and return its canonical bytes."""
    validate_run_definition(definition)
    return canonical_json(definition, what="run_definition")


def normalize_run_definition(
    definition: Mapping[str, Any], credential_slots: Sequence[str]
) -> dict[str, Any]:
    """The stored form of a live definition: normalized, redacted, validated.

    Sets ``credential_slots``, lower-cases the model's extra header names
    (``checkpoint_definition_header_collision`` when two collide), sorts and
    de-duplicates the tool policy's name lists, sorts extensions by namespace,
    and replaces every credential slot's value by ``<credential-redacted>``.
    The input is not modified.
    """
    if not isinstance(definition, Mapping):
        raise DurableError(_INVALID, "run_definition must be an object")
    normalized = copy.deepcopy(dict(definition))
    normalized["credential_slots"] = list(credential_slots)
    headers = _extra_headers(normalized)
    if headers is not None:
        lowered = {name.translate(_ASCII_LOWER): value for name, value in headers.items()}
        if len(lowered) != len(headers):
            raise DurableError(
                "checkpoint_definition_header_collision",
                "header names collide after ASCII lowercasing",
            )
        normalized["model"]["settings"]["extra_headers"] = lowered
    policy = normalized.get("tool_policy")
    if isinstance(policy, dict):
        for name in ("allowed_tools", "disallowed_tools"):
            names = policy.get(name)
            if isinstance(names, list):
                if not all(isinstance(item, str) for item in names):
                    raise DurableError(_INVALID, f"tool policy {name} must contain strings")
                policy[name] = sorted(set(names), key=utf16_sort_key)
    extensions = normalized.get("extensions")
    if isinstance(extensions, list):
        extensions.sort(key=_namespace_key)
    redacted = redact_run_definition(normalized, credential_slots)
    validate_run_definition(redacted)
    return redacted


def _namespace_key(extension: Any) -> tuple[bool, str]:
    namespace = extension.get("namespace") if isinstance(extension, Mapping) else None
    return (isinstance(namespace, str), namespace if isinstance(namespace, str) else "")
