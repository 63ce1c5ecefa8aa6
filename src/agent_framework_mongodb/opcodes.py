"""Static verification of a checkpoint pickle before the C unpickler sees it.

The verifier walks the opcode stream once, simulating the unpickler's stack
with *kinds* instead of objects, so it can tell what every opcode would act
on without constructing, importing or calling anything:

* globals must resolve through the :class:`TypePolicy` (class resolution
  only; functions, modules and unlisted classes are refused);
* ``REDUCE`` may call only a standard value type or an enum class, and only
  with arguments made of strings, scalars and tuples of them;
* ``NEWOBJ`` may create only a permitted class, and only with no arguments;
* ``BUILD`` may restore only what ``NEWOBJ`` created; ``APPEND(S)``,
  ``SETITEM(S)`` and ``ADDITEMS`` may target only real lists, dicts and sets;
* every other opcode (``EXT*``, ``INST``, ``OBJ``, persistent IDs,
  out-of-band buffers, protocol 0/1 text opcodes) is refused.

It reads opcodes itself rather than through ``pickletools.genops``: this is
on every load's path, and one tight loop is several times faster. Argument
sizes follow the pickle specification exactly, so the verifier and the C
unpickler parse the same opcode sequence; trailing bytes are refused.
"""

from __future__ import annotations

import enum
from typing import Any

from agent_framework_mongodb.errors import MongoDBSerializationError
from agent_framework_mongodb.typepolicy import TypePolicy

__all__ = ["verify"]

Kind = tuple[Any, ...]
_VALUE: Kind = ("v",)
_LIST: Kind = ("l",)
_DICT: Kind = ("d",)
_SET: Kind = ("S",)
_EMPTY_TUPLE: Kind = ("t", 0, True)

# Scalars with a fixed-size argument: opcode -> argument bytes.
_FIXED = {ord("N"): 0, 0x88: 0, 0x89: 0, ord("J"): 4, ord("K"): 1, ord("M"): 2, ord("G"): 8}
# Length-prefixed values: opcode -> (length field bytes, is a str).
_SIZED = {
    0x8A: (1, False), 0x8B: (4, False),  # LONG1, LONG4
    ord("C"): (1, False), ord("B"): (4, False), 0x8E: (8, False), 0x96: (8, False),  # bytes
    0x8C: (1, True), ord("X"): (4, True), 0x8D: (8, True),  # str
}  # fmt: skip
_SKIP = {0x80: 1, 0x95: 8}  # PROTO, FRAME
_MEMO_ARG = {ord("q"): 1, ord("r"): 4, ord("h"): 1, ord("j"): 4}  # BINPUT, BINGET
_PUTS = frozenset({ord("q"), ord("r")})
_BINGET, _SHORT_BINUNICODE, _MEMOIZE = ord("h"), 0x8C, 0x94
_STOP, _MARK = ord("."), ord("(")
_EMPTIES = {ord("]"): _LIST, ord("}"): _DICT, 0x8F: _SET, ord(")"): _EMPTY_TUPLE}
_TUPLE_N = {0x85: 1, 0x86: 2, 0x87: 3}
_TO_MARK = {ord("e"): _LIST, ord("u"): _DICT, 0x90: _SET}  # APPENDS, SETITEMS, ADDITEMS
_APPEND, _SETITEM, _TUPLE, _FROZENSET = ord("a"), ord("s"), ord("t"), 0x91
_POP, _POP_MARK = ord("0"), ord("1")
_STACK_GLOBAL, _GLOBAL, _REDUCE, _NEWOBJ, _BUILD = 0x93, ord("c"), ord("R"), 0x81, ord("b")


def verify(payload: bytes, policy: TypePolicy) -> None:
    """Refuse ``payload`` unless every opcode is one a checkpoint may contain.

    Raises ``MongoDBSerializationError`` (or the policy's mapping error for a
    refused global). Malformed input raises ``IndexError``/``ValueError``,
    which the caller translates to the same category.
    """
    data = payload
    i = 0
    stack: list[Kind] = []
    marks: list[list[Kind]] = []
    memo: dict[int, Kind] = {}
    while True:
        op = data[i]
        i += 1
        # The most frequent opcodes of real checkpoints come first.
        if op == _BINGET:
            stack.append(memo[data[i]])
            i += 1
        elif op == _MEMOIZE:
            memo[len(memo)] = stack[-1]
        elif op == _SHORT_BINUNICODE:
            start = i + 1
            i = start + data[i]
            stack.append(("s", start, i))
        elif op == _MARK:
            marks.append(stack)
            stack = []
        elif op in _EMPTIES:
            stack.append(_EMPTIES[op])
        elif op in _TO_MARK:
            stack = marks.pop()
            if stack[-1] != _TO_MARK[op]:
                raise _refuse("container opcodes must target a plain list, dict or set")
        elif op in _FIXED:
            i += _FIXED[op]
            stack.append(_VALUE)
        elif op in _SIZED:
            width, is_text = _SIZED[op]
            length = int.from_bytes(data[i : i + width], "little")
            start = i + width
            i = start + length
            if i > len(data):
                raise _refuse("a value runs past the end of the stream")
            stack.append(("s", start, i) if is_text else _VALUE)
        elif op in _MEMO_ARG:
            width = _MEMO_ARG[op]
            index = int.from_bytes(data[i : i + width], "little")
            i += width
            if op in _PUTS:
                memo[index] = stack[-1]
            else:
                stack.append(memo[index])
        elif op in _SKIP:
            i += _SKIP[op]
        elif op == _STOP:
            if marks or stack != [_DICT] or i != len(data):
                raise _refuse("the stream must hold exactly one checkpoint dictionary")
            return
        elif op == _GLOBAL:
            module_end = data.index(b"\n", i)
            name_end = data.index(b"\n", module_end + 1)
            module, name = data[i:module_end], data[module_end + 1 : name_end]
            i = name_end + 1
            stack.append(("g", policy.resolve(module.decode(), name.decode())))
        else:
            stack = _structural(op, data, stack, marks, policy)


def _structural(
    op: int, data: bytes, stack: list[Kind], marks: list[list[Kind]], policy: TypePolicy
) -> list[Kind]:
    """Apply one container, global or object opcode (none has an argument) to the stack."""
    if op in _TUPLE_N:
        size = _TUPLE_N[op]
        items = stack[len(stack) - size :]
        if len(items) != size:
            raise _refuse("a tuple needs more items than the stack holds")
        del stack[len(stack) - size :]
        stack.append(("t", size, all(map(_plain, items))))
    elif op in (_TUPLE, _FROZENSET):
        items = stack
        stack = marks.pop()
        stack.append(("t", len(items), all(map(_plain, items))) if op == _TUPLE else _VALUE)
    elif op in (_APPEND, _SETITEM):
        del stack[-1 if op == _APPEND else -2 :]
        _expect(stack[-1], _LIST if op == _APPEND else _DICT)
    elif op == _POP:
        stack.pop()
    elif op == _POP_MARK:
        stack = marks.pop()
    elif op == _STACK_GLOBAL:
        name, module = stack.pop(), stack.pop()
        if name[0] != "s" or module[0] != "s":
            raise _refuse("a global reference must be named by two strings")
        qualname = data[name[1] : name[2]].decode("utf-8", "surrogatepass")
        module_name = data[module[1] : module[2]].decode("utf-8", "surrogatepass")
        stack.append(("g", policy.resolve(module_name, qualname)))
    elif op == _REDUCE:
        args, func = stack.pop(), stack.pop()
        if func[0] != "g" or not func[1].reducible or args[0] != "t" or not args[2]:
            raise _refuse("REDUCE may only call a standard value type or an enum class")
        if issubclass(func[1].cls, enum.Enum) and args[1] != 1:
            raise _refuse("an enum member is rebuilt from exactly one value")
        stack.append(_VALUE)
    elif op == _NEWOBJ:
        args, cls = stack.pop(), stack.pop()
        if cls[0] != "g" or not cls[1].constructible:
            raise _refuse("NEWOBJ may only create a permitted object class")
        if args != _EMPTY_TUPLE:
            raise _refuse("NEWOBJ with arguments is a constructor hook and is not allowed")
        stack.append(("i", cls[1]))
    elif op == _BUILD:
        state = stack.pop()
        if stack[-1][0] != "i" or state[0] not in ("d", "t"):
            raise _refuse("BUILD may only restore the state of an object NEWOBJ created")
    else:
        raise _refuse(f"pickle opcode {bytes([op])!r} is not allowed in checkpoints")
    return stack


def _plain(kind: Kind) -> bool:
    """Strings, scalars, standard values and tuples of them: safe arguments for REDUCE."""
    return kind is _VALUE or kind[0] == "s" or (kind[0] == "t" and bool(kind[2]))


def _expect(kind: Kind, wanted: Kind) -> None:
    if kind != wanted:
        raise _refuse("container opcodes must target a plain list, dict or set")


def _refuse(reason: str) -> MongoDBSerializationError:
    return MongoDBSerializationError(f"restricted checkpoint load refused: {reason}")
