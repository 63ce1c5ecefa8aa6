"""Pages, page cursors and the clear-run result.

A cursor is the position after the last (sequence, checkpoint_id) returned,
bound to the scope it came from. It is opaque to callers and fails closed:
anything malformed, of another version or of another scope is refused rather
than read as "start over", which would silently repeat a whole run.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb.errors import MongoDBInvalidCursorError
from agent_framework_mongodb.options import storable_text

__all__ = [
    "CURSOR_VERSION",
    "MAX_SEQUENCE",
    "MongoDBCheckpointClearResult",
    "MongoDBCheckpointPage",
    "decode_cursor",
    "encode_cursor",
]

CURSOR_VERSION = 1
#: The greatest sequence a BSON int64 holds.
MAX_SEQUENCE = 2**63 - 1
_SCOPE_PREFIX_LENGTH = 16
_MAX_CURSOR_LENGTH = 4096


@dataclass(frozen=True, slots=True)
class MongoDBCheckpointPage:
    """One bounded page in (sequence, checkpoint_id) order; ``next_cursor`` is None at the end."""

    checkpoints: list[WorkflowCheckpoint]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class MongoDBCheckpointClearResult:
    """Acknowledged deletions of :meth:`MongoDBCheckpointStorage.clear_run`."""

    checkpoints_deleted: int
    counters_deleted: int


def encode_cursor(scope_discriminator: str, sequence: int, checkpoint_id: str) -> str:
    """An opaque cursor positioned after (sequence, checkpoint_id) in this scope."""
    body = [CURSOR_VERSION, scope_discriminator[:_SCOPE_PREFIX_LENGTH], sequence, checkpoint_id]
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, scope_discriminator: str) -> tuple[int, str]:
    """(sequence, checkpoint_id) of a cursor this scope issued, or ``MongoDBInvalidCursorError``.

    Only the exact text :func:`encode_cursor` produces is accepted: the body
    is decoded, checked field by field (the version must be the int itself,
    not ``1.0`` or ``true``; the sequence a BSON int64 of at least 1; the ID a
    string MongoDB can store) and encoded again, and anything but the same
    cursor (padding, non-canonical base64 or JSON) is refused.
    """
    if not isinstance(cursor, str) or not cursor or len(cursor) > _MAX_CURSOR_LENGTH:
        raise MongoDBInvalidCursorError("page cursor is malformed")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        body = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise MongoDBInvalidCursorError("page cursor is malformed") from exc
    if not isinstance(body, list) or len(body) != 4:
        raise MongoDBInvalidCursorError("page cursor is malformed")
    version, scope, sequence, checkpoint_id = body
    if type(version) is not int or version != CURSOR_VERSION:
        raise MongoDBInvalidCursorError("page cursor has an unknown version")
    if scope != scope_discriminator[:_SCOPE_PREFIX_LENGTH]:
        raise MongoDBInvalidCursorError("page cursor belongs to another scope")
    if type(sequence) is not int or not 1 <= sequence <= MAX_SEQUENCE:
        raise MongoDBInvalidCursorError("page cursor is malformed")
    if not isinstance(checkpoint_id, str) or not storable_text(checkpoint_id):
        raise MongoDBInvalidCursorError("page cursor is malformed")
    if encode_cursor(scope_discriminator, sequence, checkpoint_id) != cursor:
        raise MongoDBInvalidCursorError("page cursor is not in canonical form")
    return sequence, checkpoint_id
