"""The small value rules shared by the durable model: keys, names, digests, refs.

Blank means what Rust's ``str::trim`` strips (Unicode White_Space), not what
Python's ``str.strip`` strips: Python also strips U+001C..U+001F, which Rust
keeps, so a name of those characters alone is valid in both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentflow.durable.errors import DurableError
from agentflow.durable.wire.canonical import MAX_WIRE_INTEGER

__all__ = [
    "MAX_CHECKPOINT_KEY_BYTES",
    "MAX_EXTENSION_NAMESPACE_BYTES",
    "CapabilityRef",
    "is_blank",
    "require_non_empty",
    "require_positive",
    "require_wire_integer",
    "validate_capability_slot",
    "validate_checkpoint_key",
    "validate_extension_namespace",
    "validate_sha256",
]

MAX_CHECKPOINT_KEY_BYTES = 512
MAX_EXTENSION_NAMESPACE_BYTES = 128

_WHITE_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_HEX = frozenset("0123456789abcdef")
_NAMESPACE_BYTES = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-")
_SLOT_BYTES = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.:-")


def is_blank(value: str) -> bool:
    """True when ``value`` is empty after stripping Unicode White_Space."""
    return not value.strip(_WHITE_SPACE)


def require_non_empty(value: object, what: str, code: str = "checkpoint_value_invalid") -> str:
    """Return ``value`` if it is a non-blank string, else raise ``code``."""
    if not isinstance(value, str) or is_blank(value):
        raise DurableError(code, f"{what} must be non-empty")
    return value


def require_wire_integer(value: object, what: str, code: str, *, minimum: int = 0) -> int:
    """Return ``value`` if it is an int (not a bool) in ``minimum..2**53-1``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not minimum <= value <= MAX_WIRE_INTEGER
    ):
        raise DurableError(code, f"{what} must be an integer between {minimum} and 2**53-1")
    return value


def require_positive(value: object, what: str, code: str = "checkpoint_integer_invalid") -> int:
    """Return ``value`` if it is an int in ``1..2**53-1``, else raise ``code``."""
    return require_wire_integer(value, what, code, minimum=1)


def validate_checkpoint_key(key: object) -> str:
    """A checkpoint key: non-blank, at most 512 UTF-8 bytes, no NUL.

    NUL is refused beyond the original's rule: derived identities join their
    parts with NUL, and PostgreSQL text cannot hold it.
    """
    try:
        size = len(key.encode("utf-8")) if isinstance(key, str) else -1
    except UnicodeEncodeError:
        size = -1
    if not isinstance(key, str) or size < 0 or is_blank(key) or size > MAX_CHECKPOINT_KEY_BYTES:
        raise DurableError(
            "checkpoint_key_invalid",
            f"checkpoint key must be non-empty and at most {MAX_CHECKPOINT_KEY_BYTES} UTF-8 bytes",
        )
    if "\x00" in key:
        raise DurableError("checkpoint_key_invalid", "checkpoint key must not contain NUL")
    return key


def validate_extension_namespace(namespace: object) -> str:
    """A reverse-DNS extension namespace: ``[a-z0-9][a-z0-9._-]*`` with a dot, <= 128 bytes."""
    code = "checkpoint_extension_namespace_invalid"
    if not isinstance(namespace, str) or not namespace or not namespace.isascii():
        raise DurableError(code, "extension namespace must be non-empty ASCII")
    if len(namespace) > MAX_EXTENSION_NAMESPACE_BYTES:
        raise DurableError(
            code, f"extension namespace exceeds {MAX_EXTENSION_NAMESPACE_BYTES} bytes"
        )
    first = namespace[0]
    if not ("a" <= first <= "z" or "0" <= first <= "9"):
        raise DurableError(code, "extension namespace must begin with a lowercase letter or digit")
    if "." not in namespace or not _NAMESPACE_BYTES.issuperset(namespace):
        raise DurableError(code, "extension namespace does not match the reverse-DNS grammar")
    return namespace


def validate_sha256(value: object, what: str, code: str = "checkpoint_digest_invalid") -> str:
    """A lowercase hex SHA-256 digest (64 characters of ``0-9a-f``)."""
    if not isinstance(value, str) or len(value) != 64 or not _HEX.issuperset(value):
        raise DurableError(code, f"{what} must be a lowercase SHA-256 hex digest")
    return value


def validate_capability_slot(slot: object) -> str:
    """A capability slot name: ``[a-z][a-z0-9_.:-]*``."""
    if (
        not isinstance(slot, str)
        or not slot
        or not "a" <= slot[0] <= "z"
        or not _SLOT_BYTES.issuperset(slot)
    ):
        raise DurableError(
            "checkpoint_capability_ref_invalid", f"invalid capability reference slot {slot!r}"
        )
    return slot


@dataclass(frozen=True, slots=True)
class CapabilityRef:
    """A stable, versioned name for something process-local (a store, a provider).

    Recorded in place of the object itself, so a resumed run can check that
    the capability it is handed now is the one the run started with.
    """

    id: str
    version: str

    def validate(self, what: str = "capability reference") -> None:
        """Raise ``checkpoint_capability_ref_invalid`` unless id and version are non-blank."""
        if (
            not isinstance(self.id, str)
            or not isinstance(self.version, str)
            or is_blank(self.id)
            or is_blank(self.version)
        ):
            raise DurableError(
                "checkpoint_capability_ref_invalid", f"{what} requires non-empty id and version"
            )

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "version": self.version}

    @classmethod
    def from_dict(cls, value: object, what: str = "capability reference") -> CapabilityRef:
        """Read ``{"id", "version"}`` (exactly those two string members)."""
        if (
            not isinstance(value, Mapping)
            or set(value) != {"id", "version"}
            or not isinstance(value["id"], str)
            or not isinstance(value["version"], str)
        ):
            raise DurableError(
                "checkpoint_capability_ref_invalid", f"{what} must contain exactly id and version"
            )
        reference = cls(value["id"], value["version"])
        reference.validate(what)
        return reference


def require_mapping(value: object, what: str, code: str) -> Mapping[str, Any]:
    """Return ``value`` if it is a mapping, else raise ``code``."""
    if not isinstance(value, Mapping):
        raise DurableError(code, f"{what} must be an object")
    return value
