"""How a backend presents itself to the conformance and concurrency suites."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow.checkpoint.base import Checkpoint, Checkpointer, Redactor
from agentflow.checkpoint.codec import CheckpointCodec

__all__ = [
    "BackendHarness",
    "PayloadReader",
    "PayloadWriter",
    "StoredKeyHook",
    "make_checkpoint",
    "open_from_recipe",
]

#: An async hook on one stored record: (namespace or None, thread, step).
StoredKeyHook = Callable[[str | None, str, int], Awaitable[None]]
#: Reads the raw stored bytes of one record: (namespace or None, thread, step).
PayloadReader = Callable[[str | None, str, int], Awaitable[bytes]]
#: Overwrites them: (namespace or None, thread, step, bytes).
PayloadWriter = Callable[[str | None, str, int, bytes], Awaitable[None]]


@dataclass
class BackendHarness:
    """One fresh, empty store and the way to open checkpointers on it.

    ``factory`` builds a checkpointer from ``kwargs`` plus ``namespace``,
    ``redact`` and ``codec``; every checkpointer it builds shares the one
    store. When ``factory`` is an importable class and ``kwargs`` are
    picklable, :attr:`recipe` lets a child process open the same store (for
    the multi-process races and the crash tests).

    The damage hooks change what is stored, directly in the database or
    files, as a disk fault or a hostile operator would: the suites then check
    that a read raises instead of returning other data. A backend that cannot
    offer one leaves it None and the case that needs it fails, so it is never
    skipped silently.
    """

    name: str
    factory: Callable[..., Checkpointer]
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    #: The backend refuses path-like thread ids (``..``, separators, over 255 bytes).
    restricted_thread_ids: bool = False
    #: Several processes may open the store at once.
    multiprocess: bool = True
    #: Overwrite the stored payload of (namespace, thread, step) with garbage.
    corrupt: StoredKeyHook | None = None
    #: Overwrite the stored revision of (namespace, thread, step) with a value no
    #: write can produce (a negative number, or text where the store allows it).
    damage_revision: StoredKeyHook | None = None
    #: The stored bytes of a record's payload, exactly as the store keeps them
    #: (what the integrity envelope covers, plus any framing the store adds).
    read_payload: PayloadReader | None = None
    #: Replace those bytes in place, changing nothing else that is stored.
    write_payload: PayloadWriter | None = None

    def open(
        self,
        *,
        namespace: str | None = None,
        redact: Redactor | None = None,
        codec: CheckpointCodec | None = None,
        create: bool = True,
    ) -> Checkpointer:
        """A new checkpointer on this store (use it with ``async with``);
        ``create=False`` opens it as a read-only caller does."""
        options: dict[str, Any] = {"namespace": namespace, "redact": redact}
        if codec is not None:
            options["codec"] = codec
        if not create:
            options["create"] = False
        return self.factory(**self.kwargs, **options)

    @property
    def recipe(self) -> tuple[str, dict[str, Any]]:
        """``("module:Class", kwargs)`` to rebuild the factory in a child process."""
        factory = self.factory
        return f"{factory.__module__}:{factory.__qualname__}", dict(self.kwargs)


def open_from_recipe(
    recipe: tuple[str, dict[str, Any]], *, namespace: str | None = None
) -> Checkpointer:
    """Open a checkpointer from :attr:`BackendHarness.recipe`, in any process."""
    path, kwargs = recipe
    module, _, name = path.partition(":")
    factory = getattr(importlib.import_module(module), name)
    opened: Checkpointer = factory(**kwargs, namespace=namespace)
    return opened


def make_checkpoint(thread: str = "t", step: int = 0, **fields: Any) -> Checkpoint:
    """A checkpoint with a small default state, for tests."""
    fields.setdefault("state", {"step": step})
    return Checkpoint(thread=thread, step=step, **fields)
