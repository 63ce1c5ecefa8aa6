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
import pickletools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_framework_mongodb.canonical import canonical_bytes, object_state
from agent_framework_mongodb.errors import MongoDBCheckpointStorageError, MongoDBSerializationError
from agent_framework_mongodb.typepolicy import NATIVE_TYPES, REDUCIBLE_STANDARD_TYPES, TypePolicy

__all__ = ["PICKLE_PROTOCOL", "EncodedPayload", "dumps", "encode_validated", "loads", "verify"]

PICKLE_PROTOCOL = 5

_VALUE_OPS = frozenset(
    {
        "NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "LONG4",
        "BINFLOAT", "SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "BYTEARRAY8",
    }
)  # fmt: skip
_STRING_OPS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"})
_NOOP_OPS = frozenset({"PROTO", "FRAME"})
_VALUE = ("v",)
_LIST = ("l",)
_DICT = ("d",)
_SET = ("S",)
_EMPTY_TUPLE = ("t", 0, True)


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
        self.dispatch_table: dict[type, Any] = {}
        self._policy = policy

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        if cls in NATIVE_TYPES or cls in REDUCIBLE_STANDARD_TYPES or isinstance(obj, type):
            return NotImplemented
        if isinstance(obj, Mapping | dict):
            raise MongoDBSerializationError("mapping subclasses cannot be checkpointed")
        self._policy.check_value_type(cls)
        if isinstance(obj, enum.Enum):
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
    original = canonical_bytes(public, policy)
    payload = dumps(public, policy)
    if canonical_bytes(loads(payload, policy), policy) != original:
        raise MongoDBSerializationError(
            "checkpoint state does not survive a restricted pickle round trip unchanged"
        )
    return EncodedPayload(payload, hashlib.sha256(original).hexdigest())


def verify(payload: bytes, policy: TypePolicy) -> None:
    """Check the opcode stream statically; nothing is constructed or imported for a refusal."""
    stack: list[tuple[Any, ...]] = []
    marks: list[list[tuple[Any, ...]]] = []
    memo: dict[int, tuple[Any, ...]] = {}
    arg: Any
    for op, arg, _pos in pickletools.genops(payload):
        name = op.name
        if name in _VALUE_OPS:
            stack.append(_VALUE)
        elif name in _STRING_OPS:
            stack.append(("s", arg))
        elif name in _NOOP_OPS:
            continue
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif name in ("BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name == "MARK":
            marks.append(stack)
            stack = []
        elif name == "STOP":
            if marks or stack != [_DICT]:
                raise _refuse("the stream must end with one checkpoint dictionary")
        else:
            stack = _structural(name, arg, stack, marks, policy)


def _structural(
    name: str,
    arg: Any,
    stack: list[tuple[Any, ...]],
    marks: list[list[tuple[Any, ...]]],
    policy: TypePolicy,
) -> list[tuple[Any, ...]]:
    """Apply one container, global or object opcode to the simulated stack."""
    if name == "EMPTY_LIST":
        stack.append(_LIST)
    elif name == "EMPTY_DICT":
        stack.append(_DICT)
    elif name == "EMPTY_SET":
        stack.append(_SET)
    elif name == "EMPTY_TUPLE":
        stack.append(_EMPTY_TUPLE)
    elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
        size = int(name[-1])
        items = stack[len(stack) - size :]
        del stack[len(stack) - size :]
        stack.append(("t", size, all(map(_plain, items))))
    elif name in ("TUPLE", "FROZENSET"):
        items = stack
        stack = marks.pop()
        stack.append(("t", len(items), all(map(_plain, items))) if name == "TUPLE" else _VALUE)
    elif name in ("APPEND", "SETITEM"):
        del stack[-1 if name == "APPEND" else -2 :]
        _expect(stack[-1], _LIST if name == "APPEND" else _DICT, name)
    elif name in ("APPENDS", "SETITEMS", "ADDITEMS"):
        stack = marks.pop()
        _expect(stack[-1], {"APPENDS": _LIST, "SETITEMS": _DICT, "ADDITEMS": _SET}[name], name)
    elif name == "POP":
        stack.pop()
    elif name == "POP_MARK":
        stack = marks.pop()
    elif name in ("STACK_GLOBAL", "GLOBAL"):
        if name == "GLOBAL":
            module, _, qualname = arg.partition(" ")
        else:
            qual_kind, mod_kind = stack.pop(), stack.pop()
            if qual_kind[0] != "s" or mod_kind[0] != "s":
                raise _refuse("a global reference must be named by two strings")
            module, qualname = mod_kind[1], qual_kind[1]
        stack.append(("g", policy.resolve(module, qualname)))
    elif name == "REDUCE":
        args, func = stack.pop(), stack.pop()
        if func[0] != "g" or not func[1].reducible or args[0] != "t" or not args[2]:
            raise _refuse("REDUCE may only call a standard value type or an enum class")
        if issubclass(func[1].cls, enum.Enum) and args[1] != 1:
            raise _refuse("an enum member is rebuilt from exactly one value")
        stack.append(_VALUE)
    elif name == "NEWOBJ":
        args, cls = stack.pop(), stack.pop()
        if cls[0] != "g" or not cls[1].constructible:
            raise _refuse("NEWOBJ may only create a permitted object class")
        if args != _EMPTY_TUPLE:
            raise _refuse("NEWOBJ with arguments is a constructor hook and is not allowed")
        stack.append(("i", cls[1]))
    elif name == "BUILD":
        state = stack.pop()
        if stack[-1][0] != "i" or state[0] not in ("d", "t"):
            raise _refuse("BUILD may only restore the state of an object NEWOBJ created")
    else:
        raise _refuse(f"pickle opcode {name} is not allowed in checkpoints")
    return stack


def _plain(kind: tuple[Any, ...]) -> bool:
    """Strings, scalars, standard values and tuples of them: safe arguments for REDUCE."""
    return kind is _VALUE or kind[0] == "s" or (kind[0] == "t" and bool(kind[2]))


def _expect(kind: tuple[Any, ...], wanted: tuple[Any, ...], name: str) -> None:
    if kind != wanted:
        raise _refuse(f"{name} must target a plain container")


def _refuse(reason: str) -> MongoDBSerializationError:
    return MongoDBSerializationError(f"restricted checkpoint load refused: {reason}")
