"""``CheckpointConfig``: how a run opts into durable execution, and its checks."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow.durable.enums import (
    AmbiguousModelPolicy,
    AmbiguousToolPolicy,
    ResumePolicy,
    parse_enum,
)
from agentflow.durable.errors import DurableError
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER, utf16_sort_key
from agentflow.durable.wire.pointers import validate_pointer
from agentflow.durable.wire.validators import (
    CapabilityRef,
    validate_capability_slot,
    validate_checkpoint_key,
    validate_extension_namespace,
)

__all__ = ["DEFAULT_MAX_EXTENSION_STATE_BYTES", "CheckpointConfig"]

DEFAULT_MAX_EXTENSION_STATE_BYTES = 262_144
_POLICY = "checkpoint_policy_invalid"
_FIELDS = frozenset(
    {
        "store",
        "store_ref",
        "key",
        "resume_policy",
        "ambiguous_model_policy",
        "ambiguous_tool_policy",
        "required_extension_namespaces",
        "max_extension_state_bytes",
        "credential_slots",
        "capability_refs",
    }
)


@dataclass
class CheckpointConfig:
    """Durable execution settings for one run.

    Exactly one of ``store`` (a process-local
    :class:`~agentflow.durable.DurableStore`) or ``store_ref`` (a stable
    reference a distributed worker resolves) selects where the record lives.
    ``key`` names the record; without one a fresh key is generated, which only
    :attr:`ResumePolicy.NEW` allows. Policy fields accept their wire strings
    and hold enum members; an unknown string raises
    ``checkpoint_policy_invalid`` at construction. Call :meth:`validate`
    before the first external call: it applies the original's rules in the
    original's order, so the first broken rule decides the code.
    """

    store: Any = None
    store_ref: CapabilityRef | None = None
    key: str | None = None
    resume_policy: ResumePolicy = ResumePolicy.NEW
    ambiguous_model_policy: AmbiguousModelPolicy = AmbiguousModelPolicy.REQUIRE_RECONCILIATION
    ambiguous_tool_policy: AmbiguousToolPolicy = AmbiguousToolPolicy.REQUIRE_RECONCILIATION
    required_extension_namespaces: list[str] = field(default_factory=list)
    max_extension_state_bytes: int = DEFAULT_MAX_EXTENSION_STATE_BYTES
    credential_slots: list[str] = field(default_factory=list)
    capability_refs: dict[str, CapabilityRef] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.resume_policy = parse_enum(ResumePolicy, self.resume_policy, _POLICY, "resume_policy")
        self.ambiguous_model_policy = parse_enum(
            AmbiguousModelPolicy, self.ambiguous_model_policy, _POLICY, "ambiguous_model_policy"
        )
        self.ambiguous_tool_policy = parse_enum(
            AmbiguousToolPolicy, self.ambiguous_tool_policy, _POLICY, "ambiguous_tool_policy"
        )

    def __repr__(self) -> str:
        store = None if self.store is None else "configured"
        return (
            f"CheckpointConfig(store={store!r}, store_ref={self.store_ref!r}, key={self.key!r}, "
            f"resume_policy={self.resume_policy.value!r}, "
            f"ambiguous_model_policy={self.ambiguous_model_policy.value!r}, "
            f"ambiguous_tool_policy={self.ambiguous_tool_policy.value!r}, "
            f"required_extension_namespaces={self.required_extension_namespaces!r}, "
            f"max_extension_state_bytes={self.max_extension_state_bytes!r}, "
            f"credential_slots={self.credential_slots!r}, "
            f"capability_refs={self.capability_refs!r})"
        )

    def validate(self) -> None:
        """Raise :class:`DurableError` for the first rule this config breaks."""
        if (self.store is None) == (self.store_ref is None):
            raise DurableError(
                "checkpoint_store_selection_invalid",
                "exactly one of store or store_ref is required",
            )
        if self.store_ref is not None:
            _as_ref(self.store_ref, "CheckpointConfig.store_ref").validate(
                "CheckpointConfig.store_ref"
            )
        if self.key is None:
            if self.resume_policy is not ResumePolicy.NEW:
                raise DurableError(
                    "checkpoint_key_required",
                    "resume_if_present and require_existing need an explicit key",
                )
        else:
            validate_checkpoint_key(self.key)
        limit = self.max_extension_state_bytes
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 0 <= limit <= MAX_WIRE_INTEGER
        ):
            raise DurableError(
                "checkpoint_extension_limit_invalid",
                "max_extension_state_bytes exceeds the JSON-safe integer range",
            )
        self._validate_credential_slots()
        self._validate_required_namespaces()
        for slot in sorted(self.capability_refs):
            validate_capability_slot(slot)
            _as_ref(self.capability_refs[slot], f"capability_refs.{slot}").validate(
                f"capability_refs.{slot}"
            )

    def _validate_credential_slots(self) -> None:
        code = "checkpoint_credential_slots_invalid"
        previous: bytes | None = None
        for slot in _as_list(self.credential_slots, code, "credential_slots"):
            try:
                validate_pointer(slot)
            except DurableError as exc:
                raise DurableError(code, exc.message) from exc
            current = utf16_sort_key(slot)
            if previous is not None and previous >= current:
                raise DurableError(code, "credential slots must be sorted and unique")
            previous = current

    def _validate_required_namespaces(self) -> None:
        namespaces = _as_list(
            self.required_extension_namespaces,
            "checkpoint_extension_namespace_invalid",
            "required_extension_namespaces",
        )
        seen: set[str] = set()
        for namespace in namespaces:
            validate_extension_namespace(namespace)
            if namespace in seen:
                raise DurableError(
                    "checkpoint_extension_namespace_duplicate",
                    f"duplicate extension namespace {namespace}",
                )
            seen.add(namespace)
        if any(left > right for left, right in itertools.pairwise(namespaces)):
            raise DurableError(
                "checkpoint_extension_namespace_invalid",
                "required extension namespaces must be sorted",
            )

    @classmethod
    def new(cls, store: Any) -> CheckpointConfig:
        """The defaults with a process-local ``store`` (``CheckpointConfig::new``)."""
        return cls(store=store)

    #: The original's ``with_store``: in Rust it wraps the store in an ``Arc``
    #: first; a Python object needs no wrapping, so it is ``new``.
    with_store = new

    def capability_ref(self, slot: str) -> CapabilityRef | None:
        """The reference recorded for ``slot``, if any."""
        return self.capability_refs.get(slot)

    def to_dict(self) -> dict[str, Any]:
        """The wire form. The process-local store is shown as ``{"kind": "process_local"}``."""
        return {
            **({"store": {"kind": "process_local"}} if self.store is not None else {}),
            **({"store_ref": self.store_ref.to_dict()} if self.store_ref is not None else {}),
            "key": self.key,
            "resume_policy": self.resume_policy.value,
            "ambiguous_model_policy": self.ambiguous_model_policy.value,
            "ambiguous_tool_policy": self.ambiguous_tool_policy.value,
            "required_extension_namespaces": list(self.required_extension_namespaces),
            "max_extension_state_bytes": self.max_extension_state_bytes,
            "credential_slots": list(self.credential_slots),
            "capability_refs": {slot: ref.to_dict() for slot, ref in self.capability_refs.items()},
        }

    @classmethod
    def from_dict(cls, value: object, *, store: Any = None) -> CheckpointConfig:
        """Read the wire form; a ``store`` member selects the ``store`` passed here.

        Raises ``checkpoint_config_invalid`` for a non-object or an unknown
        member, ``checkpoint_policy_invalid`` for an unknown policy, and
        ``checkpoint_capability_ref_invalid`` for a malformed reference. The
        result is not validated: call :meth:`validate`.
        """
        if not isinstance(value, Mapping) or not _FIELDS.issuperset(value):
            raise DurableError(
                "checkpoint_config_invalid", "checkpoint config must be an object of known fields"
            )
        refs = value.get("capability_refs") or {}
        if not isinstance(refs, Mapping):
            raise DurableError(
                "checkpoint_capability_ref_invalid", "capability_refs must be an object"
            )
        store_ref = value.get("store_ref")
        return cls(
            store=store if "store" in value else None,
            store_ref=None
            if store_ref is None
            else CapabilityRef.from_dict(store_ref, "store_ref"),
            key=value.get("key"),
            resume_policy=value.get("resume_policy", ResumePolicy.NEW),
            ambiguous_model_policy=value.get(
                "ambiguous_model_policy", AmbiguousModelPolicy.REQUIRE_RECONCILIATION
            ),
            ambiguous_tool_policy=value.get(
                "ambiguous_tool_policy", AmbiguousToolPolicy.REQUIRE_RECONCILIATION
            ),
            required_extension_namespaces=list(value.get("required_extension_namespaces") or []),
            max_extension_state_bytes=value.get(
                "max_extension_state_bytes", DEFAULT_MAX_EXTENSION_STATE_BYTES
            ),
            credential_slots=list(value.get("credential_slots") or []),
            capability_refs={
                slot: CapabilityRef.from_dict(ref, f"capability_refs.{slot}")
                for slot, ref in refs.items()
            },
        )


def _as_ref(value: object, what: str) -> CapabilityRef:
    if not isinstance(value, CapabilityRef):
        raise DurableError("checkpoint_capability_ref_invalid", f"{what} must be a CapabilityRef")
    return value


def _as_list(value: object, code: str, what: str) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise DurableError(code, f"{what} must be a list of strings")
    return list(value)
