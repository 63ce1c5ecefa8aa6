"""Extensions: namespaced plugin state that travels with a run's record.

An extension (a plugin of the host: an audit trail, a rate-limit budget) is
snapshotted into the record at every durable write and restored before a
resumed run makes its first call. Its entry is bounded (64 KiB canonical) and
so is the total (``max_extension_state_bytes``). Entries of extensions this
process does not register are kept as opaque JSON; a *required* one that is
missing here blocks the resume rather than being silently dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentflow.durable.canonical import MAX_WIRE_INTEGER, canonical_json
from agentflow.durable.errors import DurableError
from agentflow.durable.validators import is_blank, validate_extension_namespace

__all__ = [
    "MAX_EXTENSION_ENTRY_BYTES",
    "CheckpointExtension",
    "ExtensionStateEntry",
    "restore_extensions",
    "snapshot_extensions",
    "validate_extension_state_size",
]

MAX_EXTENSION_ENTRY_BYTES = 65_536
_STATE = "checkpoint_extension_state_invalid"


@runtime_checkable
class CheckpointExtension(Protocol):
    """A plugin whose state is saved with the run and restored on resume."""

    @property
    def namespace(self) -> str:
        """Reverse-DNS name, unique per run (``com.example.audit``)."""
        ...

    @property
    def version(self) -> str:
        """Version of the state layout; a resume refuses a different one."""
        ...

    @property
    def required(self) -> bool:
        """True when a resume without this extension must fail."""
        ...

    def snapshot(self) -> Any:
        """The extension's state now, as JSON."""
        ...

    def restore(self, state: Any) -> None:
        """Adopt state a previous process snapshotted."""
        ...


@dataclass(frozen=True, slots=True)
class ExtensionStateEntry:
    version: str
    required: bool
    state: Any

    def validate(self) -> None:
        if not isinstance(self.version, str) or is_blank(self.version):
            raise DurableError(_STATE, "extension version must be non-empty")
        if not isinstance(self.required, bool):
            raise DurableError(_STATE, "extension required must be a boolean")
        canonical_json(self.state, what="extension state")

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "required": self.required, "state": self.state}

    @classmethod
    def from_dict(cls, value: object) -> ExtensionStateEntry:
        if not isinstance(value, Mapping):
            raise DurableError(_STATE, "extension state entry must be an object")
        if not isinstance(value.get("version"), str):
            raise DurableError(_STATE, "version must be a string")
        if not isinstance(value.get("required"), bool):
            raise DurableError(_STATE, "extension required must be a boolean")
        if "state" not in value:
            raise DurableError(_STATE, "extension state is required")
        entry = cls(value["version"], value["required"], value["state"])
        entry.validate()
        return entry


def validate_extension_state_size(
    entries: Mapping[str, ExtensionStateEntry], max_total: int = MAX_WIRE_INTEGER
) -> int:
    """Check the byte limits and return the total.

    Each entry's canonical ``{required, state, version}`` bytes (namespace not
    counted) must be at most 65,536 (``checkpoint_extension_entry_too_large``)
    and their sum at most ``max_total`` (``checkpoint_extension_state_too_large``).
    """
    total = 0
    for namespace in sorted(entries):
        size = len(canonical_json(entries[namespace].to_dict(), what="extension state entry"))
        if size > MAX_EXTENSION_ENTRY_BYTES:
            raise DurableError(
                "checkpoint_extension_entry_too_large",
                f"extension {namespace} exceeds {MAX_EXTENSION_ENTRY_BYTES} bytes",
            )
        total += size
    if total > max_total:
        raise DurableError(
            "checkpoint_extension_state_too_large", f"extension state exceeds {max_total} bytes"
        )
    return total


def _registry(extensions: Iterable[CheckpointExtension]) -> dict[str, CheckpointExtension]:
    registry: dict[str, CheckpointExtension] = {}
    for extension in extensions:
        namespace = validate_extension_namespace(extension.namespace)
        if namespace in registry:
            raise DurableError(
                "checkpoint_extension_namespace_duplicate",
                "checkpoint extension namespaces must be unique",
            )
        registry[namespace] = extension
    return registry


def snapshot_extensions(
    extensions: Iterable[CheckpointExtension],
    stored: Mapping[str, ExtensionStateEntry],
    *,
    required_namespaces: Sequence[str] = (),
    max_total: int = MAX_WIRE_INTEGER,
) -> dict[str, ExtensionStateEntry]:
    """The extension state to write: live snapshots, plus stored entries kept as they are.

    An entry is required when its extension says so or the run's config
    lists its namespace.
    """
    snapshot: dict[str, ExtensionStateEntry] = {}
    for namespace, extension in _registry(extensions).items():
        entry = ExtensionStateEntry(
            version=extension.version,
            required=extension.required or namespace in required_namespaces,
            state=extension.snapshot(),
        )
        entry.validate()
        snapshot[namespace] = entry
    for namespace, entry in stored.items():
        snapshot.setdefault(namespace, entry)
    validate_extension_state_size(snapshot, max_total)
    return dict(sorted(snapshot.items()))


def restore_extensions(
    extensions: Iterable[CheckpointExtension],
    stored: Mapping[str, ExtensionStateEntry],
    *,
    required_namespaces: Sequence[str] = (),
) -> None:
    """Hand every registered extension its stored state before a resume.

    ``checkpoint_extension_missing`` when a required stored entry has no
    extension here, or a namespace the config requires has no stored state;
    ``checkpoint_extension_version_mismatch`` when versions differ.
    """
    registry = _registry(extensions)
    for namespace in sorted(stored):
        entry = stored[namespace]
        extension = registry.get(namespace)
        if extension is None:
            if entry.required:
                raise DurableError(
                    "checkpoint_extension_missing",
                    f"required checkpoint extension {namespace!r} is unavailable",
                )
            continue
        if extension.version != entry.version:
            raise DurableError(
                "checkpoint_extension_version_mismatch",
                f"checkpoint extension {namespace!r} version mismatch",
            )
        extension.restore(entry.state)
    for namespace in required_namespaces:
        if namespace not in stored:
            raise DurableError(
                "checkpoint_extension_missing",
                f"required checkpoint extension {namespace!r} has no durable state",
            )
