"""Extensions: namespaced plugin state that travels with a run's record.

An extension (a plugin of the host: an audit trail, a rate-limit budget) is
snapshotted into the record at every durable write and restored before a
resumed run makes its first call. Its entry is bounded (64 KiB canonical) and
so is the total (``max_extension_state_bytes``). Entries of extensions this
process does not register are kept as opaque JSON; a *required* one that is
missing here blocks the resume rather than being silently dropped.

The original's trait declares ``namespace()``, ``version()`` and
``required()`` as methods; here each may be a property, a plain attribute or
such a zero-argument method. :func:`extension_identity` reads them once when
an extension is registered and refuses anything else with
``checkpoint_extension_invalid`` (or the namespace and version codes),
naming the member, instead of failing later on a bound method.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentflow.durable.errors import DurableError
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER, canonical_json
from agentflow.durable.wire.validators import is_blank, validate_extension_namespace

__all__ = [
    "MAX_EXTENSION_ENTRY_BYTES",
    "CheckpointExtension",
    "ExtensionIdentity",
    "ExtensionStateEntry",
    "extension_identity",
    "restore_extensions",
    "snapshot_extensions",
    "validate_extension_state_size",
]

MAX_EXTENSION_ENTRY_BYTES = 65_536
_STATE = "checkpoint_extension_state_invalid"


@runtime_checkable
class CheckpointExtension(Protocol):
    """A plugin whose state is saved with the run and restored on resume."""

    # Typed as properties, the Pythonic form; zero-argument methods of the same
    # names (the original's trait) are accepted too (see extension_identity).

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


@dataclass(frozen=True, slots=True)
class ExtensionIdentity:
    """What an extension declares about itself, read once at registration."""

    namespace: str
    version: str
    required: bool


def _declared(extension: object, member: str, kind: type) -> Any:
    if not hasattr(extension, member):
        raise DurableError(
            "checkpoint_extension_invalid",
            f"{type(extension).__name__} is not a CheckpointExtension: it has no {member}",
        )
    value = getattr(extension, member)
    if callable(value):
        value = value()
    if not isinstance(value, kind):
        raise DurableError(
            "checkpoint_extension_invalid",
            f"{type(extension).__name__}.{member} must be a {kind.__name__} (a property, an "
            f"attribute or a method returning one), not {type(value).__name__}",
        )
    return value


def extension_identity(extension: object) -> ExtensionIdentity:
    """Read ``namespace``, ``version`` and ``required`` (properties, attributes or methods).

    Refuses, before any state is written: a member that is missing or of
    another type (``checkpoint_extension_invalid``), a malformed namespace
    (``checkpoint_extension_namespace_invalid``), a blank version
    (``checkpoint_extension_version_invalid``, the original's code), and an
    extension without ``snapshot``/``restore`` methods.
    """
    namespace = validate_extension_namespace(_declared(extension, "namespace", str))
    version = _declared(extension, "version", str)
    if is_blank(version):
        raise DurableError(
            "checkpoint_extension_version_invalid",
            f"checkpoint extension {namespace} has an empty version",
        )
    required = _declared(extension, "required", bool)
    for method in ("snapshot", "restore"):
        if not callable(getattr(extension, method, None)):
            raise DurableError(
                "checkpoint_extension_invalid",
                f"checkpoint extension {namespace} has no {method}() method",
            )
    return ExtensionIdentity(namespace, version, required)


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


def _registry(
    extensions: Iterable[CheckpointExtension],
) -> dict[str, tuple[ExtensionIdentity, CheckpointExtension]]:
    registry: dict[str, tuple[ExtensionIdentity, CheckpointExtension]] = {}
    for extension in extensions:
        identity = extension_identity(extension)
        if identity.namespace in registry:
            raise DurableError(
                "checkpoint_extension_namespace_duplicate",
                "checkpoint extension namespaces must be unique",
            )
        registry[identity.namespace] = (identity, extension)
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
    for namespace, (identity, extension) in _registry(extensions).items():
        entry = ExtensionStateEntry(
            version=identity.version,
            required=identity.required or namespace in required_namespaces,
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

    ``checkpoint_required_extension_unavailable`` (the contract's code; the
    Rust original says ``checkpoint_extension_missing``) when a required
    stored entry has no extension registered here;
    ``checkpoint_extension_missing`` when a namespace the config requires has
    no stored state; ``checkpoint_extension_version_mismatch`` when versions
    differ.
    """
    registry = _registry(extensions)
    for namespace in sorted(stored):
        entry = stored[namespace]
        registered = registry.get(namespace)
        if registered is None:
            if entry.required:
                raise DurableError(
                    "checkpoint_required_extension_unavailable",
                    f"required checkpoint extension {namespace!r} is not registered",
                )
            continue
        identity, extension = registered
        if identity.version != entry.version:
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
