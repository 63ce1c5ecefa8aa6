"""Listed application classes whose own code building, hashing or saving could reach.

Each hook touches the file named by ``SENTINEL_ENV``. Listing a class permits
its resolution only, so none of these hooks may ever run inside the codec:
the class is refused outright, or the codec builds and saves its instances
in a way that cannot reach the hook (the "reachable only by" notes say
which opcode a plain unpickler would have used).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tests.agent_framework_mongodb.hostile_types import touch


class HashKey:
    """Reachable only by hashing: a dict key, set member or frozenset member."""

    def __hash__(self) -> int:
        touch()
        return 1


class EqKey:
    """Reachable only by comparing it with a value whose hash collides (as a key or member)."""

    def __hash__(self) -> int:
        return 1

    def __eq__(self, other: object) -> bool:
        touch()
        return False


class HashEnum(enum.Enum):
    """An enum member used as a dict key runs the enum's own ``__hash__``."""

    A = 1

    def __hash__(self) -> int:
        touch()
        return 1


class GetAttr:
    """BUILD looks up ``__setstate__`` on the new instance and reaches ``__getattr__``."""

    def __getattr__(self, name: str) -> Any:
        touch()
        raise AttributeError(name)


class GetAttribute:
    """BUILD's attribute lookups go through ``__getattribute__``."""

    def __getattribute__(self, name: str) -> Any:
        touch()
        return object.__getattribute__(self, name)


class SlotSetAttr:
    """Slot state is applied with ``setattr``."""

    __slots__ = ("x",)

    def __setattr__(self, name: str, value: Any) -> None:
        touch()
        object.__setattr__(self, name, value)


class SlotDelAttr:
    """A slotted class with ``__delattr__``: refused with ``__setattr__``."""

    __slots__ = ("x",)

    def __delattr__(self, name: str) -> None:
        touch()
        object.__delattr__(self, name)


class DictSetAttr:
    """Dict state is written into ``__dict__`` directly, never through ``__setattr__``;
    no opcode deletes attributes, so ``__delattr__`` is unreachable too."""

    def __setattr__(self, name: str, value: Any) -> None:
        touch()
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        touch()
        object.__delattr__(self, name)


class Touching:
    """A data descriptor whose ``__set__`` runs when slot state names it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return None if obj is None else getattr(obj, self.name, None)

    def __set__(self, obj: Any, value: Any) -> None:
        touch()


class SlotDescriptor:
    __slots__ = ("_guarded",)
    guarded = Touching()


class PropertySetter:
    """A property setter in a state position; the state is a dict, so BUILD never calls it."""

    def __init__(self) -> None:
        self.__dict__["level"] = 1

    @property
    def level(self) -> int:
        return int(self.__dict__.get("level", 0))

    @level.setter
    def level(self, value: int) -> None:
        touch()


class SlotProperty:
    """A property on a slotted class: slot state would call its setter."""

    __slots__ = ("_level",)

    @property
    def level(self) -> int:
        return 0

    @level.setter
    def level(self, value: int) -> None:
        touch()


class DictProperty:
    """BUILD reads ``inst.__dict__``, which this property intercepts."""

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        touch()
        return {}


class CallingMeta(enum.EnumType):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        touch()
        return super().__call__(*args, **kwargs)


class MetaEnum(enum.Enum, metaclass=CallingMeta):
    """Calling the class to rebuild a member runs the metaclass's ``__call__``."""

    A = 1


class ObjectValueEnum(enum.Enum):
    """Looking up the value 1 compares it with this member's value, an ``EqKey`` of hash 1."""

    A = EqKey()


class Finalizer:
    """``__del__`` would finalise an instance the loader never initialised."""

    def __del__(self) -> None:
        touch()


@dataclass
class SlotPlain:
    """A well-behaved slotted class, layout-compatible with ``SlotSetAttr``."""

    __slots__ = ("x",)
    x: int


@dataclass(frozen=True)
class FrozenRecord:
    """A frozen dataclass: its state is a dict, so it stays supported."""

    name: str


REFUSED = (
    GetAttr, GetAttribute, SlotSetAttr, SlotDelAttr, SlotDescriptor, SlotProperty, DictProperty,
    MetaEnum, ObjectValueEnum, Finalizer,
)  # fmt: skip
ALLOWED = (HashKey, EqKey, HashEnum, DictSetAttr, PropertySetter, SlotPlain, FrozenRecord)
ALL = tuple(f"{__name__}:{cls.__qualname__}" for cls in (*REFUSED, *ALLOWED))
