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
on every load's path, and one tight loop is several times faster. Kinds are
interned strings, ints (a string's opcode offset) and a few small objects, so
the walk allocates almost nothing the garbage collector must track: listing
a long run holds many live objects, and every tracked allocation here would
make the collector traverse them all again. Argument sizes follow the pickle
specification exactly, so the verifier and the C unpickler parse the same
opcode sequence; trailing bytes are refused.
"""

from __future__ import annotations

import enum

from agent_framework_mongodb.errors import MongoDBSerializationError
from agent_framework_mongodb.typepolicy import Resolved, TypePolicy

__all__ = ["verify"]

# A kind is a str constant below, an int (the offset of a string's opcode),
# a Resolved global, or an ("i", Resolved) instance made by NEWOBJ.
Kind = object
_VALUE, _LIST, _DICT, _SET = "v", "l", "d", "S"
_EMPTY_TUPLE, _PLAIN_SINGLE, _PLAIN_TUPLE, _OTHER_TUPLE = "t0", "t1", "tp", "tx"
_TUPLES = frozenset({_EMPTY_TUPLE, _PLAIN_SINGLE, _PLAIN_TUPLE, _OTHER_TUPLE})
_PLAIN = frozenset({_VALUE, _EMPTY_TUPLE, _PLAIN_SINGLE, _PLAIN_TUPLE})

# Scalars with a fixed-size argument: opcode -> argument bytes.
_FIXED = {ord("N"): 0, 0x88: 0, 0x89: 0, ord("J"): 4, ord("K"): 1, ord("M"): 2, ord("G"): 8}
# Length-prefixed bytes and longs: opcode -> length field bytes.
_SIZED = {0x8A: 1, 0x8B: 4, ord("C"): 1, ord("B"): 4, 0x8E: 8, 0x96: 8}
# Length-prefixed str (SHORT_BINUNICODE, BINUNICODE, BINUNICODE8): opcode -> length bytes.
_TEXT = {0x8C: 1, ord("X"): 4, 0x8D: 8}
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
    marks: list[int] = []
    memo: dict[int, Kind] = {}
    # Locals, not module globals, in the hot loop: this is its main cost.
    push, empties, to_mark, fixed = stack.append, _EMPTIES, _TO_MARK, _FIXED
    binget, memoize, short_text, mark = _BINGET, _MEMOIZE, _SHORT_BINUNICODE, _MARK
    while True:
        op = data[i]
        i += 1
        # The most frequent opcodes of real checkpoints come first.
        if op == binget:
            push(memo[data[i]])
            i += 1
        elif op == memoize:
            memo[len(memo)] = stack[-1]
        elif op == short_text:
            push(i - 1)
            i += 1 + data[i]
        elif op == mark:
            marks.append(len(stack))
        elif op in empties:
            push(empties[op])
        elif op in to_mark:
            del stack[marks.pop() :]
            if stack[-1] != to_mark[op]:
                raise _refuse("container opcodes must target a plain list, dict or set")
        elif op in fixed:
            i += fixed[op]
            push(_VALUE)
        elif op in _SIZED or op in _TEXT:
            width = _SIZED.get(op) or _TEXT[op]
            start = i + width
            end = start + int.from_bytes(data[i:start], "little")
            if end > len(data):
                raise _refuse("a value runs past the end of the stream")
            push(i - 1 if op in _TEXT else _VALUE)
            i = end
        elif op in _MEMO_ARG:
            width = _MEMO_ARG[op]
            index = int.from_bytes(data[i : i + width], "little")
            i += width
            if op in _PUTS:
                memo[index] = stack[-1]
            else:
                push(memo[index])
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
            push(policy.resolve(module.decode(), name.decode()))
        else:
            _structural(op, data, stack, marks, policy)


def _structural(
    op: int, data: bytes, stack: list[Kind], marks: list[int], policy: TypePolicy
) -> None:
    """Apply one tuple, global or object opcode (none has an argument) to the stack."""
    if op in _TUPLE_N:
        size = _TUPLE_N[op]
        if len(stack) < size:
            raise _refuse("a tuple needs more items than the stack holds")
        stack.append(_tuple_kind(stack, len(stack) - size))
    elif op in (_TUPLE, _FROZENSET):
        kind = _tuple_kind(stack, marks.pop())
        stack.append(kind if op == _TUPLE else _VALUE)
    elif op in (_APPEND, _SETITEM):
        del stack[-1 if op == _APPEND else -2 :]
        if stack[-1] != (_LIST if op == _APPEND else _DICT):
            raise _refuse("container opcodes must target a plain list, dict or set")
    elif op == _POP:
        stack.pop()
    elif op == _POP_MARK:
        del stack[marks.pop() :]
    elif op == _STACK_GLOBAL:
        name, module = stack.pop(), stack.pop()
        if type(name) is not int or type(module) is not int:
            raise _refuse("a global reference must be named by two strings")
        stack.append(policy.resolve(_text(data, module), _text(data, name)))
    elif op == _REDUCE:
        args, func = stack.pop(), stack.pop()
        if not isinstance(func, Resolved) or not func.reducible or args not in _PLAIN - {_VALUE}:
            raise _refuse("REDUCE may only call a standard value type or an enum class")
        if issubclass(func.cls, enum.Enum) and args != _PLAIN_SINGLE:
            raise _refuse("an enum member is rebuilt from exactly one value")
        stack.append(_VALUE)
    elif op == _NEWOBJ:
        args, cls = stack.pop(), stack.pop()
        if not isinstance(cls, Resolved) or not cls.constructible:
            raise _refuse("NEWOBJ may only create a permitted object class")
        if args != _EMPTY_TUPLE:
            raise _refuse("NEWOBJ with arguments is a constructor hook and is not allowed")
        stack.append(("i", cls))
    elif op == _BUILD:
        state, target = stack.pop(), stack[-1]
        if type(target) is not tuple or (state != _DICT and state not in _TUPLES):
            raise _refuse("BUILD may only restore the state of an object NEWOBJ created")
    else:
        raise _refuse(f"pickle opcode {bytes([op])!r} is not allowed in checkpoints")


def _tuple_kind(stack: list[Kind], start: int) -> Kind:
    """Pop the items from ``start`` and classify the tuple they form."""
    items = stack[start:]
    del stack[start:]
    if not items:
        return _EMPTY_TUPLE
    if all(item in _PLAIN or type(item) is int for item in items):
        return _PLAIN_SINGLE if len(items) == 1 else _PLAIN_TUPLE
    return _OTHER_TUPLE


def _text(data: bytes, position: int) -> str:
    """The str whose opcode sits at ``position`` (verified when it was pushed)."""
    width = _TEXT[data[position]]
    start = position + 1 + width
    end = start + int.from_bytes(data[position + 1 : start], "little")
    return data[start:end].decode("utf-8", "surrogatepass")


def _refuse(reason: str) -> MongoDBSerializationError:
    return MongoDBSerializationError(f"restricted checkpoint load refused: {reason}")
