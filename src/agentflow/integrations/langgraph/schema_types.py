"""The classes a compiled LangGraph graph names, and the graphs that call the saver.

LangGraph passes a graph's schema types to its saver (``with_allowlist``)
only when ``LANGGRAPH_STRICT_MSGPACK`` is set; otherwise the saver is never
given the graph at all. It is one call away, though: LangGraph's own graph
methods (``stream``, ``astream``, ``get_state``, ``update_state`` and their
kin in ``langgraph.pregel.main``) call the saver with the graph as their
``self``. :func:`calling_graphs` reads exactly those frames (a bounded walk up
the caller's stack that looks at no other frame's locals), and
:func:`graph_types` collects, from a graph and its subgraphs, every class
their state, input, output and context schemas, node input schemas and
channels name, as LangGraph's strict mode does: pydantic models, dataclasses,
enums and named tuples, through unions, containers, ``Annotated`` and
TypedDict fields.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import sys
import typing
from collections.abc import Iterable
from typing import Any, Final

import pydantic
from typing_extensions import is_typeddict

__all__ = ["calling_graphs", "graph_types"]

#: How far up the stack a saver call looks for the graph method that made it.
_MAX_FRAMES: Final = 48
_PREGEL_MODULE: Final = "langgraph.pregel.main"
_GRAPH_METHODS: Final = frozenset(
    {
        *(f"{prefix}{name}" for prefix in ("", "a") for name in ("stream", "invoke")),
        *(f"{prefix}{name}" for prefix in ("", "a") for name in ("get_state", "update_state")),
        *(f"{prefix}get_state_history" for prefix in ("", "a")),
        *(f"{prefix}bulk_update_state" for prefix in ("", "a")),
        "_astream",
        "_stream",
    }
)
#: Forms whose first argument is the type and the rest is not (metadata, values).
_FIRST_ARG_ONLY: Final = frozenset(
    {typing.Annotated, typing.ClassVar, typing.Final, typing.Required, typing.NotRequired}
)


def calling_graphs(skip: int = 1) -> list[Any]:
    """The graphs whose LangGraph methods are on the caller's stack, nearest first.

    ``skip`` frames above this function's caller are passed over first (the
    saver's own methods).
    """
    frame = sys._getframe(skip + 1)
    graphs: list[Any] = []
    for _ in range(_MAX_FRAMES):
        if frame.f_code.co_name in _GRAPH_METHODS and (
            frame.f_globals.get("__name__") == _PREGEL_MODULE
        ):
            graph = frame.f_locals.get("self")
            if graph is not None and all(graph is not g for g in graphs):
                graphs.append(graph)
        if frame.f_back is None:
            break
        frame = frame.f_back
    return graphs


def graph_types(graph: Any) -> set[type]:
    """Every class ``graph`` and its subgraphs name in their schemas and channels."""
    found: set[type] = set()
    seen: set[int] = set()
    for each in _with_subgraphs(graph):
        for annotation in _annotations(each):
            _collect(annotation, found, seen)
    return found


def _with_subgraphs(graph: Any) -> list[Any]:
    graphs = [graph]
    # A graph that cannot list its subgraphs still teaches its own types.
    with contextlib.suppress(Exception):
        graphs.extend(sub for _, sub in graph.get_subgraphs(recurse=True))
    return graphs


def _annotations(graph: Any) -> Iterable[Any]:
    builder = getattr(graph, "builder", None)
    for name in ("state_schema", "input_schema", "output_schema", "context_schema"):
        yield getattr(builder, name, None)
    for node in (getattr(builder, "nodes", None) or {}).values():
        yield getattr(node, "input_schema", None)
    yield getattr(graph, "context_schema", None)
    for channel in (getattr(graph, "channels", None) or {}).values():
        for name in ("ValueType", "UpdateType"):
            try:
                yield getattr(channel, name, None)
            except Exception:  # a channel whose type is not known until it is used
                continue


def _collect(annotation: Any, found: set[type], seen: set[int]) -> None:
    if annotation is None or id(annotation) in seen:
        return
    seen.add(id(annotation))
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return
    if origin is not None:
        args = typing.get_args(annotation)
        for arg in args[:1] if origin in _FIRST_ARG_ONLY else args:
            _collect(arg, found, seen)
        return
    supertype = getattr(annotation, "__supertype__", None)  # typing.NewType
    if supertype is not None:
        _collect(supertype, found, seen)
        return
    if not isinstance(annotation, type):
        return
    if is_typeddict(annotation):
        _collect_fields(annotation, found, seen)
    elif _encoded_by_class(annotation):
        found.add(annotation)
        _collect_fields(annotation, found, seen)


def _encoded_by_class(cls: type) -> bool:
    """Whether LangGraph's encoder stores values of ``cls`` under its name."""
    return (
        _is_model(cls)
        or dataclasses.is_dataclass(cls)
        or issubclass(cls, enum.Enum)
        or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
    )


def _is_model(cls: type) -> bool:
    if issubclass(cls, pydantic.BaseModel):
        return True
    v1 = sys.modules.get("pydantic.v1")  # only a graph that imported it can use it
    return v1 is not None and issubclass(cls, v1.BaseModel)


def _collect_fields(cls: type, found: set[type], seen: set[int]) -> None:
    for annotation in _field_types(cls):
        _collect(annotation, found, seen)


def _field_types(cls: type) -> Iterable[Any]:
    """The annotations of ``cls``'s fields, resolved where they can be."""
    module = sys.modules.get(cls.__module__)
    try:
        return typing.get_type_hints(
            cls,
            globalns=vars(module) if module is not None else None,
            localns=dict(vars(cls)),
            include_extras=True,
        ).values()
    except Exception:  # a forward reference to a name defined in a function
        pass
    if issubclass(cls, pydantic.BaseModel):
        return [field.annotation for field in cls.model_fields.values()]
    if dataclasses.is_dataclass(cls):
        return [field.type for field in dataclasses.fields(cls)]
    return list(getattr(cls, "__annotations__", {}).values())
