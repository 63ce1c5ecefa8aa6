"""The lossless checkpoint encoding: a controlled pickler and a restricted loader.

Pickle keeps framework message/event objects and application executor state
exactly as they were, which no JSON projection does. Its danger is that
loading runs code named by the bytes, so both directions are constrained:

* :func:`dumps` never consults an object's own reducers or copyreg's global
  dispatch table. Every object is written as ``NEWOBJ(cls)`` + ``BUILD(state)``
  and every enum member as ``cls(value)``, from the checks of the canonical
  walk that ran first.
* :func:`loads` first verifies the whole opcode stream without executing
  it: globals must resolve through the :class:`TypePolicy`, ``REDUCE`` may
  call only standard value types and enum classes, ``NEWOBJ`` only permitted
  classes and only with no arguments, ``BUILD`` only what ``NEWOBJ`` made,
  and container opcodes only real containers. Extension codes, persistent
  IDs, out-of-band buffers and every other opcode are refused. Only a stream
  that passes is handed to the C unpickler, whose ``find_class`` consults the
  same policy again.

This is defence in depth for application-owned storage, not a boundary
against someone who can write the collection (see the docs).
"""

from __future__ import annotations

import copyreg
import enum
import hashlib
import io
import pickle  # nosec B403: restricted as described above
from dataclasses import dataclass
from typing import Any

from agent_framework_mongodb.canonical import canonical_bytes, object_state
from agent_framework_mongodb.errors import MongoDBCheckpointStorageError, MongoDBSerializationError
from agent_framework_mongodb.opcodes import verify
from agent_framework_mongodb.typepolicy import NATIVE_TYPES, REDUCIBLE_STANDARD_TYPES, TypePolicy

__all__ = ["PICKLE_PROTOCOL", "EncodedPayload", "dumps", "encode_validated", "loads"]

PICKLE_PROTOCOL = 5


@dataclass(frozen=True, slots=True)
class EncodedPayload:
    """The bytes to store and the canonical hash they were proven to round-trip to."""

    payload: bytes
    payload_hash: str


class _ControlledPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, policy: TypePolicy) -> None:
        super().__init__(file, protocol=PICKLE_PROTOCOL)
        # An instance table shadows copyreg.dispatch_table, so a reducer some
        # other code registered process-wide can never change stored bytes.
        self.dispatch_table = {}
        self._policy = policy

    def reducer_override(self, obj: Any) -> Any:
        # Only the class is inspected until the policy has vetted it: isinstance
        # on the object could already run its __getattribute__.
        cls = type(obj)
        if cls in NATIVE_TYPES or cls in REDUCIBLE_STANDARD_TYPES or issubclass(cls, type):
            return NotImplemented
        self._policy.check_value_type(cls)
        if issubclass(cls, enum.Enum):
            return (cls, (obj._value_,))
        return (copyreg.__newobj__, (cls,), object_state(obj))  # type: ignore[attr-defined]


def dumps(value: Any, policy: TypePolicy) -> bytes:
    """Pickle ``value`` with the controlled pickler (run the canonical walk first)."""
    buffer = io.BytesIO()
    _ControlledPickler(buffer, policy).dump(value)
    return buffer.getvalue()


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, policy: TypePolicy) -> None:
        super().__init__(io.BytesIO(data), buffers=())
        self._policy = policy

    def find_class(self, module: str, name: str) -> Any:
        return self._policy.resolve(module, name).cls

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent IDs are not allowed")


def loads(payload: bytes, policy: TypePolicy) -> Any:
    """Verify, then unpickle; every failure is a ``MongoDBSerializationError``-category error."""
    try:
        verify(payload, policy)
        return _RestrictedUnpickler(payload, policy).load()
    except MongoDBCheckpointStorageError:
        raise
    except Exception as exc:  # malformed bytes: ValueError, UnpicklingError, EOFError, ...
        raise MongoDBSerializationError(
            "stored checkpoint bytes failed restricted loading"
        ) from exc


def encode_validated(public: dict[str, Any], policy: TypePolicy) -> EncodedPayload:
    """Pickle ``public`` and prove the exact bytes load back to the same canonical graph."""
    strings: dict[str, bytes] = {}  # both walks meet the same strings: encode each once
    original = canonical_bytes(public, policy, strings)
    payload = dumps(public, policy)
    if canonical_bytes(loads(payload, policy), policy, strings) != original:
        raise MongoDBSerializationError(
            "checkpoint state does not survive a restricted pickle round trip unchanged"
        )
    return EncodedPayload(payload, hashlib.sha256(original).hexdigest())
