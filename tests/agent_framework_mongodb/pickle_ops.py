"""Hand-written pickle opcodes, for streams no pickler would produce.

Each helper returns the bytes of one stack effect, so a hostile stream reads
like the unpickler's view of it: ``build(new(glob(m, n)), state)``.
"""

from __future__ import annotations

import struct

PROTO = b"\x80\x05"
EMPTY_DICT, EMPTY_LIST, EMPTY_SET, EMPTY_TUPLE, MARK = b"}", b"]", b"\x8f", b")", b"("
SETITEM, SETITEMS, ADDITEMS, FROZENSET, TUPLE2, BUILD = b"s", b"u", b"\x90", b"\x91", b"\x86", b"b"
NONE, MEMOIZE = b"N", b"\x94"


def text(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def integer(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)  # BININT


def glob(module: str, name: str) -> bytes:
    return text(module) + text(name) + b"\x93"  # STACK_GLOBAL


def call(func: bytes, *args: bytes) -> bytes:
    return func + MARK + b"".join(args) + b"tR"  # MARK args TUPLE REDUCE


def new(cls: bytes) -> bytes:
    return cls + EMPTY_TUPLE + b"\x81"  # NEWOBJ with no arguments


def build(obj: bytes, state: bytes) -> bytes:
    return obj + state + BUILD


def dict_of(*pairs: tuple[bytes, bytes]) -> bytes:
    return EMPTY_DICT + MARK + b"".join(k + v for k, v in pairs) + SETITEMS


def set_of(*members: bytes) -> bytes:
    return EMPTY_SET + MARK + b"".join(members) + ADDITEMS


def frozenset_of(*members: bytes) -> bytes:
    return MARK + b"".join(members) + FROZENSET


def slot_state(**slots: bytes) -> bytes:
    """A (None, {slot: value}) BUILD state: the slot half is applied with setattr."""
    return NONE + dict_of(*((text(k), v) for k, v in slots.items())) + TUPLE2


def wrap(value: bytes) -> bytes:
    """Put ``value`` inside a checkpoint-shaped dict so only the hostile part can fail."""
    return PROTO + EMPTY_DICT + text("state") + value + SETITEM + b"."
