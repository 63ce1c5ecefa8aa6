"""How a backend presents itself to the conformance and concurrency suites."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow.checkpoint.base import Checkpoint, Checkpointer, Redactor

__all__ = ["BackendHarness", "make_checkpoint", "open_from_recipe"]


@dataclass
class BackendHarness:
    """One fresh, empty store and the way to open checkpointers on it.

    ``factory`` builds a checkpointer from ``kwargs`` plus ``namespace`` and
    ``redact``; every checkpointer it builds shares the one store. When
    ``factory`` is an importable class and ``kwargs`` are picklable,
    :attr:`recipe` lets a child process open the same store (for the
    multi-process races and the crash tests).
    """

    name: str
    factory: Callable[..., Checkpointer]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: The backend refuses path-like thread ids (``..``, separators, over 255 bytes).
    restricted_thread_ids: bool = False
    #: Several processes may open the store at once.
    multiprocess: bool = True
    #: Overwrite the stored payload of (namespace, thread, step) with garbage.
    corrupt: Callable[[str | None, str, int], Awaitable[None]] | None = None

    def open(self, *, namespace: str | None = None, redact: Redactor | None = None) -> Any:
        """A new checkpointer on this store (use it with ``async with``)."""
        return self.factory(**self.kwargs, namespace=namespace, redact=redact)

    @property
    def recipe(self) -> tuple[str, dict[str, Any]]:
        """``("module:Class", kwargs)`` to rebuild the factory in a child process."""
        factory = self.factory
        return f"{factory.__module__}:{factory.__qualname__}", dict(self.kwargs)


def open_from_recipe(recipe: tuple[str, dict[str, Any]], *, namespace: str | None = None) -> Any:
    """Open a checkpointer from :attr:`BackendHarness.recipe`, in any process."""
    path, kwargs = recipe
    module, _, name = path.partition(":")
    factory = getattr(importlib.import_module(module), name)
    return factory(**kwargs, namespace=namespace)


def make_checkpoint(thread: str = "t", step: int = 0, **fields: Any) -> Checkpoint:
    """A checkpoint with a small default state, for tests."""
    fields.setdefault("state", {"step": step})
    return Checkpoint(thread=thread, step=step, **fields)
