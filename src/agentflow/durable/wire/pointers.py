"""RFC 6901 JSON pointers, as credential slots use them.

The empty pointer names the whole document. ``~0`` and ``~1`` are the only
escapes. An array index is read as Rust's ``usize`` parser reads it: an
optional ``+`` then ASCII digits, leading zeros allowed (stricter RFC 6901
readers refuse ``01``; the original accepts it, and so do we).
"""

from __future__ import annotations

from typing import Any

from agentflow.durable.errors import DurableError

__all__ = ["pointer_tokens", "resolve_json_pointer", "set_json_pointer", "validate_pointer"]

_INVALID = "checkpoint_credential_slots_invalid"
_UNRESOLVED = "checkpoint_credential_slot_unresolved"


def pointer_tokens(pointer: object) -> list[str]:
    """Split and unescape ``pointer``; raise ``checkpoint_credential_slots_invalid``."""
    if not isinstance(pointer, str):
        raise DurableError(_INVALID, "JSON pointer must be a string")
    if not pointer:
        return []
    if not pointer.startswith("/"):
        raise DurableError(_INVALID, "JSON pointer must be empty or start with '/'")
    tokens = []
    for raw in pointer[1:].split("/"):
        parts = raw.split("~")
        token = [parts[0]]
        for part in parts[1:]:
            if not part or part[0] not in "01":
                raise DurableError(_INVALID, "JSON pointer contains an invalid escape")
            token.append(("~" if part[0] == "0" else "/") + part[1:])
        tokens.append("".join(token))
    return tokens


def validate_pointer(pointer: object) -> str:
    """Return ``pointer`` if it is a well-formed JSON pointer."""
    pointer_tokens(pointer)
    assert isinstance(pointer, str)
    return pointer


def _index(token: str, pointer: str) -> int:
    digits = token[1:] if token.startswith("+") else token
    if not digits or not digits.isascii() or not digits.isdigit():
        raise DurableError(_UNRESOLVED, f"JSON pointer {pointer} has an invalid array index")
    return int(digits)


def _child(current: Any, token: str, pointer: str) -> tuple[Any, Any]:
    """Return ``(container key, child)`` of ``current`` at ``token``."""
    if isinstance(current, dict):
        if token in current:
            return token, current[token]
    elif isinstance(current, list):
        index = _index(token, pointer)
        if index < len(current):
            return index, current[index]
    raise DurableError(_UNRESOLVED, f"JSON pointer {pointer} does not resolve")


def resolve_json_pointer(value: Any, pointer: str) -> Any:
    """The value ``pointer`` names inside ``value``; ``checkpoint_credential_slot_unresolved``."""
    current = value
    for token in pointer_tokens(pointer):
        _, current = _child(current, token, pointer)
    return current


def set_json_pointer(value: Any, pointer: str, replacement: Any) -> Any:
    """Replace, in place, the existing value ``pointer`` names; return the document.

    The target must exist (nothing is created). The empty pointer replaces
    the whole document, so use the return value.
    """
    tokens = pointer_tokens(pointer)
    if not tokens:
        return replacement
    current = value
    for token in tokens[:-1]:
        _, current = _child(current, token, pointer)
    key, _ = _child(current, tokens[-1], pointer)
    current[key] = replacement
    return value
