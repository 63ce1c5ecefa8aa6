"""Type hints as checkpoint values: ``dict[str, int]``, ``str | None``, ``Optional[X]``.

Agent Framework keeps the response type a workflow passed to
``ctx.request_info(data, response_type)`` inside the pending request, so a
checkpoint may hold a class (``dict``, ``str``, an application dataclass), a
hint built from classes, or ``typing.Any``. Pickle stores a class as a
reference, which loads without running anything, but it would rebuild a hint
by calling an arbitrary function (``operator.getitem``, ``functools.reduce``)
or cannot store it at all. So the controlled pickler writes each hint as a
call of one of the builders below, the verifier lets ``REDUCE`` call a
builder only with class references and hints as arguments, and each builder
makes its hint with the hint type's own constructor or the ``|`` of
``type``, never anything the classes define (every permitted class has a
plain metaclass). A builder checks what it was handed, so a stream that
passes the verifier with a wrong shape fails to load instead of building
something else.

``None`` stands for ``NoneType`` in the arguments of a union, as in source
code; ``Ellipsis`` (``tuple[int, ...]``) has a builder of its own.
"""

from __future__ import annotations

import functools
import operator
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

__all__ = [
    "BUILDERS",
    "BUILDER_FUNCTIONS",
    "FORM_TYPES",
    "Builder",
    "ellipsis",
    "form_reduction",
    "generic_alias",
    "typing_union",
    "union",
]

_TYPING_UNION: Final[type] = type(typing.Optional[int])  # noqa: UP045 - the typing form itself
#: The hint types a checkpoint may hold (besides classes themselves).
FORM_TYPES: Final[frozenset[Any]] = frozenset({types.GenericAlias, types.UnionType, _TYPING_UNION})


def _is_part(value: object) -> bool:
    """A class, a hint, ``None`` or ``Ellipsis``: what a hint may be built from."""
    return (
        value is None
        or value is Ellipsis
        or issubclass(type(value), type)
        or type(value) in FORM_TYPES
    )


def _parts(args: object) -> tuple[Any, ...]:
    if type(args) is not tuple or not all(_is_part(arg) for arg in args):
        raise TypeError("a type hint is built from a tuple of classes and hints")
    return args


def generic_alias(origin: object, args: object) -> types.GenericAlias:
    """``origin[args]`` for a builtin generic such as ``dict`` or ``list``."""
    if not issubclass(type(origin), type):
        raise TypeError("a generic alias needs a class as its origin")
    return types.GenericAlias(cast(type, origin), _parts(args))


def union(args: object) -> Any:
    """``args[0] | args[1] | ...`` (``types.UnionType``)."""
    parts = _parts(args)
    if len(parts) < 2:
        raise TypeError("a union joins at least two types")
    return functools.reduce(operator.or_, parts)


def typing_union(args: object) -> Any:
    """``typing.Union[args]`` (what ``typing.Optional`` makes)."""
    parts = _parts(args)
    if len(parts) < 2:
        raise TypeError("a union joins at least two types")
    return typing.Union[parts]  # noqa: UP007 - the typing form itself


def ellipsis() -> types.EllipsisType:
    """``...``, as in ``tuple[int, ...]``."""
    return Ellipsis


@dataclass(frozen=True, slots=True)
class Builder:
    """A builder the loader may call by name, from the verified stream."""

    name: str
    function: Callable[..., Any]


#: ``module:qualname`` -> builder, as the pickle stream names them.
BUILDERS: Final[dict[tuple[str, str], Builder]] = {
    (__name__, f.__name__): Builder(f.__name__, f)
    for f in (generic_alias, union, typing_union, ellipsis)
}


#: The builders themselves, which the pickler writes by reference.
BUILDER_FUNCTIONS: Final[tuple[Callable[..., Any], ...]] = tuple(
    builder.function for builder in BUILDERS.values()
)


def _without_none_type(args: tuple[Any, ...]) -> tuple[Any, ...]:
    # Pickle cannot store NoneType by reference; the union builders take None.
    return tuple(None if arg is type(None) else arg for arg in args)


def form_reduction(value: Any) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
    """How the controlled pickler writes a hint (or ``...``); None for anything else."""
    cls = type(value)
    if cls is types.GenericAlias:
        return generic_alias, (value.__origin__, value.__args__)
    if cls is types.UnionType:
        return union, (_without_none_type(value.__args__),)
    if cls is _TYPING_UNION:
        return typing_union, (_without_none_type(value.__args__),)
    if value is Ellipsis:
        return ellipsis, ()
    return None
