"""A ``WorkflowCheckpoint`` as record bytes, through ``agent_framework_mongodb``'s codec.

The codec is the MongoDB storage's own :class:`~agent_framework_mongodb.CheckpointCodec`
(one implementation, so equal safety): ``encode`` pickles the public
checkpoint dictionary with the controlled pickler and proves the exact bytes
load back, through the restricted loader, to the same canonical graph;
``decode`` verifies the opcode stream before loading and runs no code of any
class involved. This module adds base64 (records are JSON) and maps the
codec's refusals onto agentflow's errors: a value that cannot be stored is
:class:`~agentflow.errors.CheckpointNotSerializable`; stored bytes naming a
class the storage does not permit are
:class:`~agentflow.integrations.agent_framework.CheckpointTypeNotPermitted`
(a refusal, not damage); other stored bytes that do not load are
:class:`~agentflow.errors.CheckpointCorrupted`; each with the codec's error
as ``__cause__``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import NamedTuple

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException

from agent_framework_mongodb import CheckpointCodec
from agent_framework_mongodb.errors import MongoDBMappingError, MongoDBTypeNotPermittedError
from agentflow.errors import CheckpointCorrupted, CheckpointNotSerializable
from agentflow.integrations.agent_framework.errors import CheckpointTypeNotPermitted
from agentflow.integrations.agent_framework.records import SEPARATOR, Stored

__all__ = ["Encoded", "PayloadCodec"]


class Encoded(NamedTuple):
    """A checkpoint's record payload and the canonical identity it was proven to keep."""

    payload: str
    payload_hash: str


class PayloadCodec:
    """Encodes and decodes checkpoints under one set of allowed application types."""

    __slots__ = ("_codec",)

    def __init__(self, allowed_checkpoint_types: Iterable[str]) -> None:
        self._codec = CheckpointCodec(allowed_checkpoint_types)

    def encode(self, checkpoint: WorkflowCheckpoint) -> Encoded:
        try:
            encoded = self._codec.encode(checkpoint.to_dict())
        except MongoDBMappingError as exc:
            raise CheckpointNotSerializable(
                f"the checkpoint of workflow {checkpoint.workflow_name!r} cannot be stored "
                f"safely: {exc}"
            ) from exc
        return Encoded(base64.b64encode(encoded.payload).decode("ascii"), encoded.payload_hash)

    def decode(self, stored: Stored) -> WorkflowCheckpoint:
        """The checkpoint of a ``checkpoint`` record, checked against its id and thread."""
        where = f"thread {stored.source.thread!r} step {stored.step}"
        try:
            data = base64.b64decode(stored.fields["payload"], validate=True)
            checkpoint = WorkflowCheckpoint.from_dict(self._codec.decode(data))
        except MongoDBTypeNotPermittedError as exc:
            raise CheckpointTypeNotPermitted(f"{where}: {exc}") from exc
        except (binascii.Error, ValueError, MongoDBMappingError) as exc:
            raise CheckpointCorrupted(f"{where}: the checkpoint does not load: {exc}") from exc
        except WorkflowCheckpointException as exc:
            raise CheckpointCorrupted(
                f"{where}: the stored fields do not match this Agent Framework version"
            ) from exc
        workflow_name = stored.source.thread.partition(SEPARATOR)[0]
        if (
            checkpoint.checkpoint_id != stored.checkpoint_id
            or checkpoint.workflow_name != workflow_name
        ):
            raise CheckpointCorrupted(f"{where}: the checkpoint disagrees with its record")
        return checkpoint
