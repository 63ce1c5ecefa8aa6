"""Application classes that are listed in the storage's allowlist and are still dangerous.

Listing a class permits its resolution only. Each class here would run code
(touching the file named by ``SENTINEL_ENV``) if the loader let a pickle
stream call its constructor or one of its pickle hooks.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SENTINEL_ENV = "AGENTFLOW_TEST_SENTINEL"


def touch(*_args: Any) -> None:
    Path(os.environ[SENTINEL_ENV]).touch()


class Constructor:
    """Side effect in ``__init__``: reachable only if REDUCE may call a listed class."""

    def __init__(self, *args: Any) -> None:
        touch()


class NewHook:
    """Side effect in ``__new__``: reachable through NEWOBJ with or without arguments."""

    def __new__(cls, *args: Any) -> NewHook:
        touch()
        return super().__new__(cls)


class Reducer:
    def __reduce__(self) -> Any:
        return (touch, ())


class ReducerEx:
    def __reduce_ex__(self, protocol: Any) -> Any:
        return (touch, ())


class SetState:
    def __setstate__(self, state: Any) -> None:
        touch()


class NewArgs:
    def __getnewargs__(self) -> tuple[Any, ...]:
        touch()
        return ()


class MissingEnum(enum.Enum):
    A = 1

    @classmethod
    def _missing_(cls, value: object) -> Any:
        touch()
        return None


class Level(enum.Enum):
    """A well-behaved listed enum: loads by value, fails cleanly for unknown values."""

    LOW = 1


class SetItemMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __setitem__(self, key: str, value: Any) -> None:
        touch()


@dataclass
class Plain:
    """A well-behaved listed dataclass: the control case that must load."""

    name: str
    size: int


ALL = tuple(
    f"{__name__}:{cls.__qualname__}"
    for cls in (Constructor, NewHook, Reducer, ReducerEx, SetState, NewArgs, MissingEnum,
                Level, SetItemMapping, Plain)
)  # fmt: skip
