"""Pages, page cursors and the clear-run result.

A cursor is the position after the last (sequence, checkpoint_id) returned,
bound to the scope it came from. It is opaque to callers and fails closed:
anything malformed, of another version or of another scope is refused rather
than read as "start over", which would silently repeat a whole run.

A cursor is the body of the language-neutral contract (:func:`encode_cursor`:
version, scope prefix, sequence, ID as canonical JSON in base64url), then
``.`` and a keyed MAC of that body (:class:`CursorSigner`). The body is
checked first, without I/O; the MAC then, with the secret. The key is derived
from a random secret kept in the collection itself (one document, created on
first use) and the full scope discriminator, so nobody who can only read a
cursor, or who knows the scope, can mint or alter one; a cursor of another
collection or scope fails the MAC. It is authenticated, not encrypted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from dataclasses import dataclass
from typing import Any, Final

from agent_framework import WorkflowCheckpoint
from bson.binary import Binary
from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from agent_framework_mongodb.errors import MongoDBInvalidCursorError, MongoDBMappingError
from agent_framework_mongodb.indexes import SIMPLE_COLLATION
from agent_framework_mongodb.options import storable_text
from agent_framework_mongodb.telemetry import driver_errors

__all__ = [
    "CURSOR_SECRET_ID",
    "CURSOR_VERSION",
    "MAX_SEQUENCE",
    "CursorSigner",
    "MongoDBCheckpointClearResult",
    "MongoDBCheckpointPage",
    "cursor_secret",
    "decode_cursor",
    "encode_cursor",
    "split_cursor",
]

CURSOR_VERSION = 1
#: The greatest sequence a BSON int64 holds.
MAX_SEQUENCE = 2**63 - 1
_SCOPE_PREFIX_LENGTH = 16
_MAX_CURSOR_LENGTH = 4096
#: The collection's one cursor-secret document (no scope: every run shares it).
CURSOR_SECRET_ID: Final = "workflow_checkpoint_cursor_secret"
_SECRET_BYTES: Final = 32
_MAC_BYTES: Final = 16


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


def split_cursor(cursor: object) -> tuple[str, str]:
    """(body, MAC) of a cursor, checking only its shape (no secret needed yet)."""
    if not isinstance(cursor, str) or len(cursor) > _MAX_CURSOR_LENGTH:
        raise MongoDBInvalidCursorError("page cursor is malformed")
    body, dot, mac = cursor.rpartition(".")
    if not dot or not body or not mac:
        raise MongoDBInvalidCursorError("page cursor is not one this storage issued")
    return body, mac


class CursorSigner:
    """Issues the authenticated cursors of one scope, and checks their MACs."""

    __slots__ = ("_key", "_scope")

    def __init__(self, secret: bytes, scope_discriminator: str) -> None:
        self._scope = scope_discriminator
        self._key = hashlib.blake2b(
            scope_discriminator.encode(),
            key=secret,
            digest_size=32,
            person=b"afmongo-cursor",
        ).digest()

    def __repr__(self) -> str:
        return "CursorSigner(<secret>)"

    def _mac(self, body: str) -> str:
        digest = hashlib.blake2b(body.encode(), key=self._key, digest_size=_MAC_BYTES).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def encode(self, sequence: int, checkpoint_id: str) -> str:
        """The cursor after (sequence, checkpoint_id): the contract body, ``.``, its MAC."""
        body = encode_cursor(self._scope, sequence, checkpoint_id)
        return f"{body}.{self._mac(body)}"

    def verify(self, body: str, mac: str) -> None:
        """Refuse a MAC this scope's key did not make (an altered or foreign cursor)."""
        if not hmac.compare_digest(mac.encode(), self._mac(body).encode()):
            raise MongoDBInvalidCursorError(
                "page cursor was altered, or issued for another scope or collection"
            )


async def cursor_secret(collection: Any) -> bytes:
    """The collection's cursor secret, created (once, by whichever storage is
    first) when it is missing."""
    query = {"_id": CURSOR_SECRET_ID}
    for _ in range(2):  # a concurrent first creation loses the insert, then reads
        with driver_errors(write=False):
            found = await collection.find_one(query, collation=SIMPLE_COLLATION)
        if found is None:
            with driver_errors(write=True):
                try:
                    found = await collection.find_one_and_update(
                        query,
                        {"$setOnInsert": {"secret": Binary(os.urandom(_SECRET_BYTES))}},
                        upsert=True,
                        return_document=ReturnDocument.AFTER,
                        collation=SIMPLE_COLLATION,
                    )
                except DuplicateKeyError:
                    continue
        secret = None if found is None else found.get("secret")
        if not isinstance(secret, bytes) or len(secret) != _SECRET_BYTES:
            raise MongoDBMappingError("the collection's cursor secret document is damaged")
        return bytes(secret)
    raise MongoDBMappingError("the collection's cursor secret could not be created")
