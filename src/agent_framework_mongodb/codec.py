"""The lossless checkpoint encoding: a controlled pickler and a restricted loader.

Pickle keeps framework message/event objects and application executor state
exactly as they were, which no JSON projection does. Its danger is that
loading runs code named by the bytes, so both directions are constrained:

* :func:`dumps` never consults an object's own reducers or copyreg's global
  dispatch table. Every object is written as ``NEWOBJ(cls)`` + ``BUILD(state)``,
  every enum member as ``cls(value)`` and every type hint as a call of its
  :mod:`~agent_framework_mongodb.typeforms` builder, from the checks of the
  canonical walk that ran first.
* :func:`loads` first verifies the whole opcode stream without executing
  it: globals must resolve through the :class:`TypePolicy`, ``REDUCE`` may
  call only standard value types and enum classes, ``NEWOBJ`` only permitted
  classes and only with no arguments, ``BUILD`` only what ``NEWOBJ`` made
  and only once, container opcodes only real containers, and dict keys and
  set members only primitive values. Extension codes, persistent IDs,
  out-of-band buffers and every other opcode are refused. Only a stream that
  passes is handed to the C unpickler, whose ``find_class`` consults the
  same policy again.

Together with the class rules of the policy, loading any byte string runs no
code of a permitted class (no constructor, pickle hook, attribute hook,
descriptor, ``__hash__``/``__eq__``, finaliser or metaclass method) and
imports nothing. It still returns whatever permitted values the bytes spell,
so it is no defence against someone who can write the collection choosing
those values (see the docs). :class:`CheckpointCodec` is the entry point.
"""

from __future__ import annotations

import copyreg
import enum
import hashlib
import io
import pickle  # nosec B403: restricted as described above
import types
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent_framework_mongodb.canonical import canonical_bytes, object_state
from agent_framework_mongodb.errors import (
    MongoDBCheckpointStorageError,
    MongoDBSerializationError,
    MongoDBTypeNotPermittedError,
)
from agent_framework_mongodb.opcodes import verify
from agent_framework_mongodb.typeforms import BUILDER_FUNCTIONS, Builder, form_reduction
from agent_framework_mongodb.typepolicy import NATIVE_TYPES, REDUCIBLE_STANDARD_TYPES, TypePolicy

__all__ = ["PICKLE_PROTOCOL", "CheckpointCodec", "EncodedPayload", "dumps", "loads"]

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
        form = form_reduction(obj)  # a type hint (the canonical walk vetted its parts)
        if form is not None:
            return form
        if cls is types.FunctionType and any(obj is f for f in BUILDER_FUNCTIONS):
            return NotImplemented  # the hint's builder, written by reference (never hashed)
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
        resolved = self._policy.resolve(module, name)
        return resolved.function if isinstance(resolved, Builder) else resolved.cls

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


class CheckpointCodec:
    """The restricted, verified pickle codec of Agent Framework's public checkpoint dictionary.

    Independent of MongoDB and of any I/O, so every storage that keeps bytes
    can share it::

        codec = CheckpointCodec(allowed_checkpoint_types=("myapp.models:Report",))
        encoded = codec.encode(checkpoint.to_dict())  # EncodedPayload(payload, payload_hash)
        ...store encoded.payload, compare encoded.payload_hash for idempotency...
        checkpoint = WorkflowCheckpoint.from_dict(codec.decode(stored_bytes))

    ``encode`` refuses what cannot round-trip safely (``MongoDBMappingError``,
    or its subtype ``MongoDBSerializationError``), pickles with the controlled
    pickler, and proves the exact bytes load back through the restricted loader
    to the same canonical graph; ``payload_hash`` is the versioned canonical
    identity (:data:`~agent_framework_mongodb.canonical.CANONICAL_HASH_VERSION`),
    not a hash of the bytes. ``decode`` verifies, then loads; every refusal is
    ``MongoDBSerializationError`` or ``MongoDBMappingError``. Neither runs code
    of the classes involved (see ``docs/agent_framework_mongodb.md``).
    """

    __slots__ = ("_policy",)

    def __init__(self, allowed_checkpoint_types: Iterable[str] = ()) -> None:
        self._policy = TypePolicy(allowed_checkpoint_types)

    @property
    def policy(self) -> TypePolicy:
        """The permitted types, shared by the pickler, the verifier and the loader."""
        return self._policy

    def encode(self, public: dict[str, Any]) -> EncodedPayload:
        """Pickle ``public`` and prove the exact bytes load back to the same canonical graph."""
        policy = self._policy
        strings: dict[str, bytes] = {}  # both walks meet the same strings: encode each once
        original = canonical_bytes(public, policy, strings)
        payload = dumps(public, policy)
        if canonical_bytes(loads(payload, policy), policy, strings) != original:
            raise MongoDBSerializationError(
                "checkpoint state does not survive a restricted pickle round trip unchanged"
            )
        return EncodedPayload(payload, hashlib.sha256(original).hexdigest())

    def decode(self, payload: bytes) -> dict[str, Any]:
        """The public checkpoint dictionary stored as ``payload``, loaded without running hooks.

        A class the policy does not permit is refused in Agent Framework's own
        words ("Checkpoint deserialization blocked for type ..."), as its
        storages refuse one.
        """
        try:
            public: dict[str, Any] = loads(payload, self._policy)  # the verifier admits a dict
        except MongoDBTypeNotPermittedError as exc:
            blocked = f"Checkpoint deserialization blocked for type '{exc.type_key}': {exc}"
            raise MongoDBTypeNotPermittedError(blocked, exc.type_key) from exc
        return public
