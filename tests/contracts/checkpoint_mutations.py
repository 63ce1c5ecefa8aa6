"""The contract fixtures' mutation language: how a case derives its input from a base case."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from agentflow.durable import resolve_json_pointer
from agentflow.durable.wire.pointers import pointer_tokens

__all__ = ["mutate", "set_at"]


def set_at(document: dict[str, Any], pointer: str, value: Any) -> None:
    """Set ``pointer`` in ``document`` (not the whole document), creating objects on the way."""
    *parents, last = pointer_tokens(pointer)
    node: Any = document
    for token in parents:
        node = node.setdefault(token, {}) if isinstance(node, dict) else node[int(token)]
    node[last] = value


def mutate(base: Mapping[str, Any], mutation: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with ``mutation`` applied (every operation the fixtures use)."""
    document: dict[str, Any] = copy.deepcopy(dict(base))
    for operation, argument in mutation.items():
        if operation == "remove":
            for name in [argument] if isinstance(argument, str) else argument:
                del document[name]
        elif operation in ("replace", "add"):
            document.update(copy.deepcopy(argument))
        elif operation == "replace_json_pointer":
            set_at(document, argument, copy.deepcopy(mutation["value"]))
        elif operation == "append_json_pointer":
            resolve_json_pointer(document, argument).append(mutation["value"])
        elif operation == "remove_json_pointer":
            *parents, last = pointer_tokens(argument)
            parent: Any = document
            for token in parents:
                parent = parent[token] if isinstance(parent, dict) else parent[int(token)]
            del parent[last]
        elif operation == "swap_array_indices":
            items = resolve_json_pointer(document, argument["json_pointer"])
            left, right = argument["left"], argument["right"]
            items[left], items[right] = items[right], items[left]
        elif operation != "value":
            raise AssertionError(f"unknown fixture mutation {operation!r}")
    return document
