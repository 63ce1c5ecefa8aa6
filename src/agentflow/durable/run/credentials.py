"""Credential slots: secrets that shape a run but never reach storage.

A slot is a JSON pointer into the run definition (``/model/settings/
extra_headers/authorization``). The stored definition holds
``<credential-redacted>`` at every slot, and the digest is taken over that
form, so rotating a key changes nothing stored and a resumed run still
matches. Because the secret is not stored, a resume must be handed it live:
:func:`live_credentials` reads the live values and refuses a placeholder.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow.durable.errors import DurableError
from agentflow.durable.wire.canonical import utf16_sort_key
from agentflow.durable.wire.pointers import resolve_json_pointer, set_json_pointer, validate_pointer

__all__ = [
    "CREDENTIAL_REDACTED",
    "KNOWN_CREDENTIAL_HEADERS",
    "live_credentials",
    "redact_run_definition",
    "require_declared_credential_headers",
    "validate_credential_slots",
]

CREDENTIAL_REDACTED = "<credential-redacted>"
#: Header names that always carry a secret; a definition that sends one must declare it.
KNOWN_CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key"}
)
_SLOTS = "checkpoint_credential_slots_invalid"


def _ordered_slots(slots: Sequence[Any]) -> list[str]:
    """Check each slot is a pointer and the list is strictly UTF-16 ascending."""
    previous: bytes | None = None
    checked = []
    for slot in slots:
        if not isinstance(slot, str):
            raise DurableError(_SLOTS, "credential slots must be strings")
        current = utf16_sort_key(slot)
        if previous is not None and previous >= current:
            raise DurableError(_SLOTS, "credential slots must be sorted and unique")
        validate_pointer(slot)
        previous = current
        checked.append(slot)
    return checked


def validate_credential_slots(definition: Any, slots: Sequence[Any]) -> None:
    """Every slot resolves in ``definition`` to the placeholder; the list is ordered.

    Each slot is checked (a string, a pointer, resolving, redacted) before the
    order of the list, so a slot that does not resolve reports
    ``checkpoint_credential_slot_unresolved`` even when it is also out of order.
    """
    for slot in slots:
        if not isinstance(slot, str):
            raise DurableError(_SLOTS, "credential slots must be strings")
        validate_pointer(slot)
        if resolve_json_pointer(definition, slot) != CREDENTIAL_REDACTED:
            raise DurableError(
                "checkpoint_credential_value_not_redacted",
                f"credential slot {slot} is not redacted",
            )
    _ordered_slots(slots)


def redact_run_definition(definition: Mapping[str, Any], slots: Sequence[str]) -> dict[str, Any]:
    """A copy of ``definition`` with ``<credential-redacted>`` at every slot.

    Each slot must name an existing value (``checkpoint_credential_slot_unresolved``).
    """
    redacted: Any = copy.deepcopy(dict(definition))
    for slot in _ordered_slots(slots):
        redacted = set_json_pointer(redacted, slot, CREDENTIAL_REDACTED)
    if not isinstance(redacted, dict):
        raise DurableError("checkpoint_definition_invalid", "run_definition must be an object")
    return redacted


def require_declared_credential_headers(
    definition: Mapping[str, Any], slots: Sequence[str]
) -> None:
    """Refuse (``checkpoint_definition_unstable``) a known credential header left undeclared.

    Without this an ``authorization`` header would be stored in clear and a
    key rotation would change the digest, breaking every resume.
    """
    model = definition.get("model")
    settings = model.get("settings") if isinstance(model, Mapping) else None
    headers = settings.get("extra_headers") if isinstance(settings, Mapping) else None
    if not isinstance(headers, Mapping):
        return
    declared = set(slots)
    missing = sorted(
        name
        for name in headers
        if name in KNOWN_CREDENTIAL_HEADERS
        and f"/model/settings/extra_headers/{name}" not in declared
    )
    if missing:
        raise DurableError(
            "checkpoint_definition_unstable",
            "model credential headers require explicit credential_slots: " + ", ".join(missing),
        )


def live_credentials(live_definition: Mapping[str, Any], slots: Sequence[str]) -> dict[str, Any]:
    """The secret at each slot of a live definition, for a resume to use.

    Raises ``checkpoint_credential_not_supplied`` when a slot still holds the
    placeholder: a stored definition cannot stand in for live credentials.
    """
    values: dict[str, Any] = {}
    for slot in _ordered_slots(slots):
        value = resolve_json_pointer(live_definition, slot)
        if value == CREDENTIAL_REDACTED:
            raise DurableError(
                "checkpoint_credential_not_supplied",
                f"credential slot {slot} must be supplied live on resume",
            )
        values[slot] = value
    return values
