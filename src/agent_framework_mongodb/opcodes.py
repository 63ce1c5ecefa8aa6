"""Static verification of a checkpoint pickle before the C unpickler sees it.

The verifier walks the opcode stream once, simulating the unpickler's stack
with *kinds* instead of objects, so it can tell what every opcode would act
on without constructing, importing or calling anything:

* globals must resolve through the :class:`TypePolicy` (class resolution
  only; functions, modules and unlisted classes are refused);
* ``REDUCE`` may call only a standard value type or an enum class, with
  arguments made of strings, scalars and tuples of them, or a type hint
  builder of :mod:`~agent_framework_mongodb.typeforms`, with arguments made of
  class references, hints and ``None``;
* ``NEWOBJ`` may create only a permitted class, and only with no arguments;
* ``BUILD`` may restore only what ``NEWOBJ`` created, once per object, and
  may pass slot state only to classes that have slots (or a trusted
  ``__setstate__``); ``APPEND(S)``, ``SETITEM(S)`` and ``ADDITEMS`` may target
  only real lists, dicts and sets;
* dict keys, set and frozenset members, and ``REDUCE`` arguments must be
  primitive values: strings, scalars, standard values and tuples of them
  (never enum members, objects or classes), so building a container never
  runs an object's ``__hash__`` or ``__eq__``;
* every other opcode (``EXT*``, ``INST``, ``OBJ``, persistent IDs,
  out-of-band buffers, protocol 0/1 text opcodes, and the ``BINPUT``/
  ``LONG_BINPUT`` memo writes a protocol 5 pickler never emits) is refused.

It reads opcodes itself rather than through ``pickletools.genops``: this is
on every load's path, and one tight loop is several times faster. The
frequent opcodes are compared inline; the rest dispatch through a table of
per-opcode handlers built from the argument-size tables below. Kinds are
interned strings, ints and one small object per ``NEWOBJ``, so the walk
allocates almost nothing the garbage collector must track: listing
a long run holds many live objects, and every tracked allocation here would
make the collector traverse them all again. Argument sizes follow the pickle
specification exactly, so the verifier and the C unpickler parse the same
opcode sequence; trailing bytes are refused.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import cast

from agent_framework_mongodb.errors import MongoDBSerializationError
from agent_framework_mongodb.typeforms import Builder
from agent_framework_mongodb.typepolicy import Resolved, TypePolicy

__all__ = ["verify"]

# A kind is an int, a str constant below, a Resolved global, or an _Instance
# made by NEWOBJ. Exactly the primitive (hashable) kinds are ints: a string is
# the offset of its opcode (>= 0), the other primitives are negative. So
# "every key is an int" is the whole dict-key check on the hot path.
Kind = object
_VALUE, _EMPTY_TUPLE, _PLAIN_SINGLE, _PLAIN_TUPLE = -1, -2, -3, -4
_LIST, _DICT, _SET, _OTHER_TUPLE, _ENUM_MEMBER = "l", "d", "S", "tx", "e"
_TYPE_FORM, _FORM_TUPLE = "T", "tT"  # a built type hint; a tuple of classes, hints and primitives
_TUPLES = frozenset({_EMPTY_TUPLE, _PLAIN_SINGLE, _PLAIN_TUPLE, _OTHER_TUPLE, _FORM_TUPLE})
_CALL_ARGS = frozenset({_EMPTY_TUPLE, _PLAIN_SINGLE, _PLAIN_TUPLE})  # tuples of primitives
_BUILDER_ARGS = frozenset({_EMPTY_TUPLE, _FORM_TUPLE})
# sum() adds ints in C and raises TypeError at the first kind that is no int:
# the fastest "are all these dict keys primitive?" for the hot loop.
_sum_ints = cast(Callable[[list[Kind]], int], sum)

# Scalars with a fixed-size argument: opcode -> argument bytes.
_FIXED = {ord("N"): 0, 0x88: 0, 0x89: 0, ord("J"): 4, ord("K"): 1, ord("M"): 2, ord("G"): 8}
# Length-prefixed bytes and longs: opcode -> length field bytes.
_SIZED = {0x8A: 1, 0x8B: 4, ord("C"): 1, ord("B"): 4, 0x8E: 8, 0x96: 8}
# Length-prefixed str (SHORT_BINUNICODE, BINUNICODE, BINUNICODE8): opcode -> length bytes.
_TEXT = {0x8C: 1, ord("X"): 4, 0x8D: 8}
_SKIP = {0x80: 1, 0x95: 8}  # PROTO, FRAME
_LONG_BINGET = ord("j")
_STOP = ord(".")
_EMPTIES = {ord("]"): _LIST, ord("}"): _DICT, 0x8F: _SET, ord(")"): _EMPTY_TUPLE}
_TUPLE_N = {0x85: 1, 0x86: 2, 0x87: 3}
_APPEND, _APPENDS, _SETITEM, _SETITEMS, _ADDITEMS = ord("a"), ord("e"), ord("s"), ord("u"), 0x90
_TUPLE, _FROZENSET = ord("t"), 0x91
_POP, _POP_MARK = ord("0"), ord("1")
_STACK_GLOBAL, _GLOBAL, _REDUCE, _NEWOBJ, _BUILD = 0x93, ord("c"), ord("R"), 0x81, ord("b")


def verify(payload: bytes, policy: TypePolicy) -> None:
    """Refuse ``payload`` unless every opcode is one a checkpoint may contain.

    Raises ``MongoDBSerializationError`` (or the policy's mapping error for a
    refused global). Malformed input raises ``IndexError``/``ValueError``,
    which the caller translates to the same category.

    The loop handles the opcodes that make up nearly all of a real
    checkpoint inline, as literal-int comparisons in frequency order, and
    folds the ``MEMOIZE``/``MARK`` that the pickler writes straight after a
    string or an empty container into the same iteration; everything else
    goes through :func:`_rare`. The memo is a list, because ``MEMOIZE``
    (the only memo write protocol 4+ picklers emit) appends to it.
    """
    data = payload
    stack: list[Kind] = []
    marks: list[int] = []
    memo: list[Kind] = []
    # Locals, not module globals, in the hot loop: lookups are its main cost.
    push, remember, mark, total = stack.append, memo.append, marks.append, _sum_ints
    value, list_kind, dict_kind = _VALUE, _LIST, _DICT
    frame = _Frame(data, stack, marks, memo, policy)
    i = 0
    while True:
        op = data[i]
        if op == 0x68:  # BINGET
            push(memo[data[i + 1]])
            i += 2
        elif op == 0x7D:  # EMPTY_DICT, usually followed by MEMOIZE and MARK
            push(dict_kind)
            i += 1
            if data[i] == 0x94:
                remember(dict_kind)
                i += 1
            if data[i] == 0x28:
                mark(len(stack))
                i += 1
        elif op == 0x75:  # SETITEMS
            start = marks.pop()
            try:
                total(stack[start::2])
            except TypeError:
                _check_primitives(stack[start::2])
            del stack[start:]
            if stack[-1] is not dict_kind:
                raise _refuse("container opcodes must target a plain list, dict or set")
            i += 1
        elif op == 0x8C:  # SHORT_BINUNICODE, usually followed by MEMOIZE
            push(i)
            start = i
            i += 2 + data[i + 1]
            if data[i] == 0x94:
                remember(start)
                i += 1
        elif op == 0x5D:  # EMPTY_LIST, usually followed by MEMOIZE and MARK
            push(list_kind)
            i += 1
            if data[i] == 0x94:
                remember(list_kind)
                i += 1
            if data[i] == 0x28:
                mark(len(stack))
                i += 1
        elif op == 0x65:  # APPENDS
            del stack[marks.pop() :]
            if stack[-1] is not list_kind:
                raise _refuse("container opcodes must target a plain list, dict or set")
            i += 1
        elif op == 0x94:  # MEMOIZE
            remember(stack[-1])
            i += 1
        elif op == 0x28:  # MARK
            mark(len(stack))
            i += 1
        elif op in {0x88, 0x89, 0x4E}:  # NEWTRUE, NEWFALSE, NONE
            push(value)
            i += 1
        elif op == 0x4B:  # BININT1
            push(value)
            i += 2
        elif op == 0x4D:  # BININT2
            push(value)
            i += 3
        else:
            i = _rare(op, frame, i + 1)
            if i < 0:
                return


class _Frame:
    """The verifier's state, handed to the handlers of less frequent opcodes."""

    __slots__ = ("data", "marks", "memo", "policy", "stack")

    def __init__(
        self, data: bytes, stack: list[Kind], marks: list[int], memo: list[Kind], policy: TypePolicy
    ) -> None:
        self.data, self.stack, self.marks, self.memo, self.policy = data, stack, marks, memo, policy


class _Instance:
    """The kind of one object ``NEWOBJ`` made; memo references share it."""

    __slots__ = ("built", "resolved")

    def __init__(self, resolved: Resolved) -> None:
        self.resolved = resolved
        self.built = False


Handler = Callable[[_Frame, int], int]


def _rare(op: int, frame: _Frame, i: int) -> int:
    """Apply one less frequent opcode whose argument starts at ``i``; the next offset.

    Returns -1 after a ``STOP`` that ends a well-formed stream. Every opcode
    without a handler (``EXT*``, ``INST``, ``OBJ``, ``BINPUT``, persistent IDs,
    buffers, protocol 0/1 text opcodes, ...) is refused.
    """
    handler = _HANDLERS.get(op)
    if handler is None:
        raise _refuse(f"pickle opcode {bytes([op])!r} is not allowed in checkpoints")
    return handler(frame, i)


def _fixed(width: int) -> Handler:
    def scalar(f: _Frame, i: int) -> int:
        f.stack.append(_VALUE)
        return i + width

    return scalar


def _sized(width: int, text: bool) -> Handler:
    def sized(f: _Frame, i: int) -> int:
        start = i + width
        end = start + int.from_bytes(f.data[i:start], "little")
        if end > len(f.data):
            raise _refuse("a value runs past the end of the stream")
        f.stack.append(i - 1 if text else _VALUE)
        return end

    return sized


def _empty(kind: Kind) -> Handler:
    def empty(f: _Frame, i: int) -> int:
        f.stack.append(kind)
        return i

    return empty


def _appends(f: _Frame, i: int) -> int:
    del f.stack[f.marks.pop() :]
    _target(f.stack, _LIST)
    return i


def _append(f: _Frame, i: int) -> int:
    del f.stack[-1:]
    _target(f.stack, _LIST)
    return i


def _setitems(f: _Frame, i: int) -> int:
    start = f.marks.pop()
    _check_primitives(f.stack[start::2])
    del f.stack[start:]
    _target(f.stack, _DICT)
    return i


def _setitem(f: _Frame, i: int) -> int:
    _check_primitives(f.stack[-2:-1])
    del f.stack[-2:]
    _target(f.stack, _DICT)
    return i


def _additems(f: _Frame, i: int) -> int:
    start = f.marks.pop()
    _check_primitives(f.stack[start:])
    del f.stack[start:]
    _target(f.stack, _SET)
    return i


def _skip(width: int) -> Handler:
    def skip(f: _Frame, i: int) -> int:
        return i + width

    return skip


def _tuple_n(size: int) -> Handler:
    def tuple_n(f: _Frame, i: int) -> int:
        if len(f.stack) < size:
            raise _refuse("a tuple needs more items than the stack holds")
        f.stack.append(_tuple_kind(f.stack, len(f.stack) - size))
        return i

    return tuple_n


def _long_binget(f: _Frame, i: int) -> int:
    f.stack.append(f.memo[int.from_bytes(f.data[i : i + 4], "little")])
    return i + 4


def _stop(f: _Frame, i: int) -> int:
    if f.marks or f.stack != [_DICT] or i != len(f.data):
        raise _refuse("the stream must hold exactly one checkpoint dictionary")
    return -1


def _global(f: _Frame, i: int) -> int:
    data = f.data
    module_end = data.index(b"\n", i)
    name_end = data.index(b"\n", module_end + 1)
    module, name = data[i:module_end], data[module_end + 1 : name_end]
    f.stack.append(f.policy.resolve(module.decode(), name.decode()))
    return name_end + 1


def _stack_global(f: _Frame, i: int) -> int:
    name, module = f.stack.pop(), f.stack.pop()
    if type(name) is not int or type(module) is not int or min(name, module) < 0:
        raise _refuse("a global reference must be named by two strings")
    f.stack.append(f.policy.resolve(_text(f.data, module), _text(f.data, name)))
    return i


def _tuple(f: _Frame, i: int) -> int:
    f.stack.append(_tuple_kind(f.stack, f.marks.pop()))
    return i


def _frozenset(f: _Frame, i: int) -> int:
    start = f.marks.pop()
    _check_primitives(f.stack[start:])
    del f.stack[start:]
    f.stack.append(_VALUE)
    return i


def _pop(f: _Frame, i: int) -> int:
    f.stack.pop()
    return i


def _pop_mark(f: _Frame, i: int) -> int:
    del f.stack[f.marks.pop() :]
    return i


def _reduce(f: _Frame, i: int) -> int:
    args, func = f.stack.pop(), f.stack.pop()
    if type(func) is Builder:
        if args not in _BUILDER_ARGS:
            raise _refuse("a type hint is built only from classes, hints and None")
        f.stack.append(_TYPE_FORM)
        return i
    if not isinstance(func, Resolved) or not func.reducible or args not in _CALL_ARGS:
        raise _refuse("REDUCE may only call a standard value type or an enum class")
    if issubclass(func.cls, enum.Enum):
        if args != _PLAIN_SINGLE:
            raise _refuse("an enum member is rebuilt from exactly one value")
        f.stack.append(_ENUM_MEMBER)
    else:
        f.stack.append(_VALUE)
    return i


def _newobj(f: _Frame, i: int) -> int:
    args, cls = f.stack.pop(), f.stack.pop()
    if not isinstance(cls, Resolved) or not cls.constructible:
        raise _refuse("NEWOBJ may only create a permitted object class")
    if args != _EMPTY_TUPLE:
        raise _refuse("NEWOBJ with arguments is a constructor hook and is not allowed")
    f.stack.append(_Instance(cls))
    return i


def _build(f: _Frame, i: int) -> int:
    state, target = f.stack.pop(), f.stack[-1]
    if type(target) is not _Instance or target.built:
        # A second BUILD would find attributes the first one set, such as an
        # instance-level __setstate__, and call them.
        raise _refuse("BUILD may only restore the state of an object NEWOBJ created, once")
    if state in _TUPLES:
        if not target.resolved.slot_state:
            raise _refuse("slot state is only restored on classes that have slots")
    elif state != _DICT:
        raise _refuse("BUILD state must be a dict or a (dict, slots) pair")
    target.built = True
    return i


_HANDLERS: dict[int, Handler] = {
    **{op: _fixed(width) for op, width in _FIXED.items()},
    **{op: _sized(width, False) for op, width in _SIZED.items()},
    **{op: _sized(width, True) for op, width in _TEXT.items()},
    **{op: _empty(kind) for op, kind in _EMPTIES.items()},
    **{op: _skip(width) for op, width in _SKIP.items()},
    **{op: _tuple_n(size) for op, size in _TUPLE_N.items()},
    _APPEND: _append,
    _APPENDS: _appends,
    _SETITEM: _setitem,
    _SETITEMS: _setitems,
    _ADDITEMS: _additems,
    _LONG_BINGET: _long_binget,
    _STOP: _stop,
    _GLOBAL: _global,
    _STACK_GLOBAL: _stack_global,
    _TUPLE: _tuple,
    _FROZENSET: _frozenset,
    _POP: _pop,
    _POP_MARK: _pop_mark,
    _REDUCE: _reduce,
    _NEWOBJ: _newobj,
    _BUILD: _build,
}


def _tuple_kind(stack: list[Kind], start: int) -> Kind:
    """Pop the items from ``start`` and classify the tuple they form."""
    items = stack[start:]
    del stack[start:]
    if not items:
        return _EMPTY_TUPLE
    if all(type(item) is int or _primitive_instance(item) for item in items):
        return _PLAIN_SINGLE if len(items) == 1 else _PLAIN_TUPLE
    if all(type(item) is int or _hint_part(item) for item in items):
        return _FORM_TUPLE
    return _OTHER_TUPLE


def _hint_part(kind: Kind) -> bool:
    """A class reference, a built hint, or a tuple of them: what a hint is built from."""
    return type(kind) is Resolved or kind in (_TYPE_FORM, _FORM_TUPLE, _EMPTY_TUPLE)


def _primitive_instance(kind: Kind) -> bool:
    return type(kind) is _Instance and kind.resolved.hashable


def _check_primitive(kind: Kind) -> None:
    """Refuse a non-primitive dict key or set member (the caller saw it is no int)."""
    if not _primitive_instance(kind):
        raise _refuse(
            "dict keys and set members must be primitive values, never objects, "
            "enum members or classes (their __hash__ and __eq__ would run)"
        )


def _check_primitives(kinds: list[Kind]) -> None:
    for kind in kinds:
        if type(kind) is not int:
            _check_primitive(kind)


def _target(stack: list[Kind], kind: Kind) -> None:
    if stack[-1] is not kind:
        raise _refuse("container opcodes must target a plain list, dict or set")


def _text(data: bytes, position: int) -> str:
    """The str whose opcode sits at ``position`` (verified when it was pushed)."""
    width = _TEXT[data[position]]
    start = position + 1 + width
    end = start + int.from_bytes(data[position + 1 : start], "little")
    return data[start:end].decode("utf-8", "surrogatepass")


def _refuse(reason: str) -> MongoDBSerializationError:
    return MongoDBSerializationError(f"restricted checkpoint load refused: {reason}")
