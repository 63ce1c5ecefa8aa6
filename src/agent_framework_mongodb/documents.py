"""Mapping between ``WorkflowCheckpoint`` and its immutable MongoDB document.

Only the public ``to_dict()``/``from_dict()`` methods touch the checkpoint.
Four independent compatibility gates are written on every document and
checked on every read, so that a document written by a future release (or by
an older hash version) is refused with migration guidance instead of being
loaded on a best-effort basis.
"""

from __future__ import annotations

import datetime
from typing import Any, Final

import bson
from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from bson.binary import Binary

from agent_framework_mongodb.canonical import CANONICAL_HASH_VERSION
from agent_framework_mongodb.codec import CheckpointCodec, EncodedPayload
from agent_framework_mongodb.errors import (
    MongoDBAuthorizationError,
    MongoDBMappingError,
    MongoDBSerializationError,
)
from agent_framework_mongodb.indexes import CHECKPOINT_KIND
from agent_framework_mongodb.options import MongoDBCheckpointStorageOptions, storable_text

__all__ = [
    "FRAMEWORK_VERSION",
    "PAYLOAD_VERSION",
    "SCHEMA_VERSION",
    "MAX_DOCUMENT_BYTES",
    "build_document",
    "check_document_size",
    "checkpoint_from_document",
    "encode_checkpoint",
    "stored_position",
    "stored_sequence",
]

SCHEMA_VERSION = 1
FRAMEWORK_VERSION = "agent-framework-core/1:WorkflowCheckpoint.to_dict/v1"
PAYLOAD_VERSION = "1.0"
_MIGRATE = "; migrate the stored checkpoints with the release that wrote them"
#: The largest document MongoDB stores (``maxBsonObjectSize``).
MAX_DOCUMENT_BYTES: Final = 16 * 1024 * 1024
#: A sequence as wide as any (BSON int64), for sizing a document before it has one.
_WIDEST_SEQUENCE: Final = 2**63 - 1


def encode_checkpoint(
    checkpoint: WorkflowCheckpoint, options: MongoDBCheckpointStorageOptions, codec: CheckpointCodec
) -> EncodedPayload:
    """Validate scope and version, then encode; runs before any MongoDB call.

    Encoding happens synchronously inside ``save`` before its first await, so
    the stored bytes are a snapshot of the checkpoint at call time.
    """
    if not isinstance(checkpoint, WorkflowCheckpoint):
        raise MongoDBMappingError("save expects an agent_framework.WorkflowCheckpoint")
    if checkpoint.workflow_name != options.workflow_name:
        raise MongoDBAuthorizationError(
            "checkpoint workflow_name differs from the name this storage is bound to"
        )
    checkpoint_id = checkpoint.checkpoint_id
    if not isinstance(checkpoint_id, str) or not checkpoint_id or not storable_text(checkpoint_id):
        raise MongoDBMappingError(
            "checkpoint_id must be a non-empty string without lone surrogates"
        )
    parent = checkpoint.previous_checkpoint_id
    if parent is not None and not (isinstance(parent, str) and storable_text(parent)):
        raise MongoDBMappingError(
            "previous_checkpoint_id must be None or a string without lone surrogates"
        )
    if checkpoint.version != PAYLOAD_VERSION:
        raise MongoDBMappingError(
            "checkpoint version is not supported by this release; upgrade the storage package"
        )
    return codec.encode(checkpoint.to_dict())


def build_document(
    checkpoint: WorkflowCheckpoint,
    encoded: EncodedPayload,
    options: MongoDBCheckpointStorageOptions,
    *,
    sequence: int,
    created_at: datetime.datetime,
    expires_at: datetime.datetime | None,
) -> dict[str, Any]:
    """The document stored for one checkpoint (see the docs for the field list)."""
    document: dict[str, Any] = {
        "_id": options.document_id(checkpoint.checkpoint_id),
        "_kind": CHECKPOINT_KIND,
        "schema_version": SCHEMA_VERSION,
        "framework_version": FRAMEWORK_VERSION,
        "payload_version": checkpoint.version,
        "idempotency_hash_version": CANONICAL_HASH_VERSION,
        **options.scope_filter(),
        "checkpoint_id": checkpoint.checkpoint_id,
        "parent_checkpoint_id": checkpoint.previous_checkpoint_id,
        "sequence": sequence,
        "created_at": created_at,
        "checkpoint": Binary(encoded.payload),
        "payload_hash": encoded.payload_hash,
    }
    if expires_at is not None:
        document["expires_at"] = expires_at
    return document


def check_document_size(
    checkpoint: WorkflowCheckpoint,
    encoded: EncodedPayload,
    options: MongoDBCheckpointStorageOptions,
) -> None:
    """Refuse a checkpoint whose document MongoDB would refuse, before any sequence is taken.

    The document is sized exactly: every field but the payload is encoded
    (with the widest sequence and, under a TTL, an expiry), and BSON adds the
    payload's bytes to a binary field unchanged.
    """
    moment = datetime.datetime.now(datetime.UTC)
    frame = build_document(
        checkpoint,
        EncodedPayload(b"", encoded.payload_hash),
        options,
        sequence=_WIDEST_SEQUENCE,
        created_at=moment,
        expires_at=None if options.ttl is None else moment,
    )
    size = len(bson.encode(frame)) + len(encoded.payload)
    if size > MAX_DOCUMENT_BYTES:
        raise MongoDBSerializationError(
            f"the checkpoint document would be {size} bytes and MongoDB stores at most "
            f"{MAX_DOCUMENT_BYTES} (16 MiB); keep large data outside the workflow state"
        )


def expiry(created_at: datetime.datetime, ttl: datetime.timedelta) -> datetime.datetime:
    """``created_at + ttl`` truncated to BSON's millisecond precision."""
    moment = created_at + ttl
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def check_hash_version(document: dict[str, Any]) -> None:
    """Refuse documents whose idempotency hash this release cannot compare."""
    version = document.get("idempotency_hash_version")
    if version == 1:
        raise MongoDBMappingError(
            "checkpoint uses idempotency hash version 1, which version 2 does not accept" + _MIGRATE
        )
    if version != CANONICAL_HASH_VERSION:
        raise MongoDBMappingError("checkpoint has an unknown idempotency hash version" + _MIGRATE)


def stored_sequence(document: dict[str, Any]) -> int:
    """The ``sequence`` of a stored checkpoint or counter; a mapping error if it is damaged."""
    sequence = document.get("sequence")
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 1:
        raise MongoDBMappingError("stored document has no valid sequence")
    return sequence


def stored_position(document: dict[str, Any]) -> tuple[int, str]:
    """(sequence, checkpoint_id) of a stored checkpoint; a mapping error if either is damaged."""
    checkpoint_id = document.get("checkpoint_id")
    if not isinstance(checkpoint_id, str):
        raise MongoDBMappingError("stored checkpoint has no valid checkpoint_id")
    return stored_sequence(document), checkpoint_id


def checkpoint_from_document(
    document: dict[str, Any], options: MongoDBCheckpointStorageOptions, codec: CheckpointCodec
) -> WorkflowCheckpoint:
    """Check the gates and the scope, then restore through the restricted loader."""
    if document.get("_kind") != CHECKPOINT_KIND:
        raise MongoDBMappingError("document is not a workflow checkpoint")
    if document.get("schema_version") != SCHEMA_VERSION:
        raise MongoDBMappingError("checkpoint has an unknown schema_version" + _MIGRATE)
    if document.get("framework_version") != FRAMEWORK_VERSION:
        raise MongoDBMappingError("checkpoint has an unknown framework_version" + _MIGRATE)
    if document.get("payload_version") != PAYLOAD_VERSION:
        raise MongoDBMappingError("checkpoint has an unknown payload_version" + _MIGRATE)
    check_hash_version(document)
    if any(document.get(k) != v for k, v in options.scope_filter().items()):
        raise MongoDBAuthorizationError("checkpoint document belongs to another scope")
    stored_position(document)
    payload = document.get("checkpoint")
    if not isinstance(payload, bytes):
        raise MongoDBMappingError("checkpoint document has no binary payload")
    public = codec.decode(bytes(payload))
    try:
        checkpoint = WorkflowCheckpoint.from_dict(public)
    except WorkflowCheckpointException as exc:
        raise MongoDBMappingError(
            "stored checkpoint fields do not match this framework version" + _MIGRATE
        ) from exc
    if (
        checkpoint.checkpoint_id != document.get("checkpoint_id")
        or checkpoint.previous_checkpoint_id != document.get("parent_checkpoint_id")
        or checkpoint.workflow_name != options.workflow_name
        or checkpoint.version != PAYLOAD_VERSION
    ):
        raise MongoDBMappingError("checkpoint payload disagrees with its document")
    return checkpoint
