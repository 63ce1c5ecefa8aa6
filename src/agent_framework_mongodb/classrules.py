"""Which classes the codec may build, hash or save without running their own code.

The restricted loader creates an object only as ``NEWOBJ(cls)`` (``object.__new__``
with no arguments) followed by exactly one ``BUILD``, and an enum member only by
calling its class with one primitive value. All of that is C code, yet it reaches
Python code through a class's hooks, and saving reads state through the same
hooks. Each rule below closes one such path:

* ``BUILD`` looks up ``__setstate__`` and ``__dict__`` on the new instance, which
  runs ``__getattribute__``, ``__getattr__`` and a ``__dict__`` override; pickling
  reads ``__class__`` the same way. Those are refused on every class.
* Slot state is applied with ``setattr``, which runs ``__setattr__``,
  ``__delattr__``, properties and every other data descriptor, so a class whose
  instances carry slot state may define none of them. Classes without slots get
  no slot state at all (the opcode verifier refuses it), which is why frozen
  dataclasses, whose state ``BUILD`` writes straight into the instance
  dictionary, keep working.
* ``__del__`` would finalise instances the loader never initialised.
* Calling an enum class runs its metaclass's ``__call__`` and compares the value
  with the member values, so enums need the plain ``EnumType`` and primitive
  member values; any other metaclass could run ``__hash__``, ``__eq__`` or
  ``__call__`` whenever a class is cached or checked.
* A subclass of a built-in type other than ``object`` would lose its built-in
  value under ``NEWOBJ`` with no arguments, silently.

``__hash__`` and ``__eq__`` are not refused here: dict keys and set members are
limited to primitive values on both sides (:data:`HASHABLE_TYPES`), so no
object's own hash or equality ever runs. ``__init_subclass__`` and
``__set_name__`` run only when a class is created, i.e. on import, and the
loader never imports.
"""

from __future__ import annotations

import abc
import copyreg
import datetime
import decimal
import enum
import types
import typing
import uuid
from collections.abc import Iterator
from typing import Any

__all__ = [
    "HASHABLE_TYPES",
    "class_refusal",
    "has_slot_state",
    "hashable",
    "pickle_hooks",
    "plain_metaclass",
]

_PICKLE_HOOKS = (
    "__reduce__",
    "__reduce_ex__",
    "__getstate__",
    "__setstate__",
    "__getnewargs__",
    "__getnewargs_ex__",
)
#: The types a dict key, set member or enum member value may have (and tuples and
#: frozensets of them): their hash and equality are the standard library's own.
HASHABLE_TYPES: frozenset[type] = frozenset(
    {
        type(None), bool, int, float, str, bytes, datetime.date, datetime.datetime,
        datetime.time, datetime.timedelta, datetime.timezone, decimal.Decimal, uuid.UUID,
    }
)  # fmt: skip
_ATTRIBUTE_HOOKS = ("__getattribute__", "__getattr__", "__del__")
_SETTERS = ("__setattr__", "__delattr__")
_STANDARD_GETSETS = ("__dict__", "__weakref__")
_PLAIN_METACLASSES = frozenset({type, abc.ABCMeta, type(typing.Protocol)})
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: classes defined in Python


def _python_classes(cls: type) -> Iterator[type]:
    """The classes of ``cls``'s MRO whose attributes are Python code (not C built-ins)."""
    for klass in cls.__mro__:
        if klass.__flags__ & _HEAPTYPE:
            yield klass


def _owner(cls: type, name: str) -> type | None:
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def _is_data_descriptor(attr: object) -> bool:
    kind = type(attr)
    return _owner(kind, "__set__") is not None or _owner(kind, "__delete__") is not None


def pickle_hooks(cls: type) -> list[str]:
    """The pickle and construction hooks ``cls`` defines beyond ``object``'s and ``Enum``'s."""
    found = []
    for name in _PICKLE_HOOKS:
        owner = _owner(cls, name)
        if owner is None or owner is object:
            continue
        if issubclass(cls, enum.Enum):
            # Enum.__reduce_ex__ reduces a member to (cls, (value,)); it runs
            # before any mixin hook such as int.__getnewargs__ could.
            if name == "__reduce_ex__" and owner is enum.Enum:
                continue
            if name in ("__getnewargs__", "__getnewargs_ex__") and not owner.__flags__ & _HEAPTYPE:
                continue
        found.append(name)
    if issubclass(cls, enum.Enum):
        # Loading calls the enum class with the stored value, which reaches
        # _missing_ for unknown values: an override is a load-time hook.
        if _owner(cls, "_missing_") not in (enum.Enum, enum.Flag):
            found.append("_missing_")
    elif _owner(cls, "__new__") is not object:
        found.append("__new__")
    return found


def has_slot_state(cls: type) -> bool:
    """Whether pickling ``cls`` yields slot state (``BUILD`` then calls ``setattr``)."""
    return bool(copyreg._slotnames(cls))  # type: ignore[attr-defined]


def hashable(value: Any) -> bool:
    """Whether ``value`` may be a dict key or set member: primitive, recursively."""
    kind = type(value)
    if kind is tuple or kind is frozenset:
        return all(hashable(item) for item in value)
    return kind in HASHABLE_TYPES


def plain_metaclass(cls: type) -> bool:
    """Whether ``cls``'s metaclass is one whose hooks are the standard library's.

    Checked before anything else touches the class: ``issubclass`` against an
    ABC hashes and compares the class through its metaclass.
    """
    metaclass = type(cls)
    if issubclass(cls, enum.Enum):
        return metaclass is enum.EnumType
    return metaclass in _PLAIN_METACLASSES


def class_refusal(cls: type) -> str | None:
    """Why building, hashing or saving instances of ``cls`` could run its own code, or None."""
    if not plain_metaclass(cls):
        return "a custom metaclass"
    is_enum = issubclass(cls, enum.Enum)
    python_classes = list(_python_classes(cls))
    for klass in python_classes:
        attrs = vars(klass)
        for name in _ATTRIBUTE_HOOKS:
            if name in attrs:
                return name
        if "__class__" in attrs:
            return "a __class__ override"
        if "__dict__" in attrs and type(attrs["__dict__"]) is not types.GetSetDescriptorType:
            return "a __dict__ override"
    if is_enum:
        return _enum_refusal(cls)
    if any(not k.__flags__ & _HEAPTYPE and k is not object for k in cls.__mro__):
        return "a built-in base class other than object (its value would be lost)"
    if has_slot_state(cls):
        return _slot_refusal(python_classes)
    return None


def _slot_refusal(python_classes: list[type]) -> str | None:
    for klass in python_classes:
        for name, attr in vars(klass).items():
            if name in _SETTERS:
                return f"{name} on a class with slots"
            if not _is_data_descriptor(attr) or type(attr) is types.MemberDescriptorType:
                continue
            if name in _STANDARD_GETSETS and type(attr) is types.GetSetDescriptorType:
                continue
            return f"the data descriptor {name!r} on a class with slots"
    return None


def _enum_refusal(cls: type[enum.Enum]) -> str | None:
    if has_slot_state(cls):
        return "slots on an enum"
    for member in vars(cls)["_member_map_"].values():
        if not hashable(vars(member)["_value_"]):
            return "a member value that is not a primitive value"
    return None
