"""How a backend presents itself to the conformance and concurrency suites."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from agentflow.checkpoint.base import Checkpoint, Checkpointer, Redactor
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.store import Store

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing
    from agentflow.durable.testing import DurableHarness
    from agentflow.durable.testing.harness import PartReader, PartWriter

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
    """One fresh, empty database and the way to open stores on it.

    ``factory`` builds a store from ``kwargs`` plus ``namespace``, ``redact``,
    ``codec``, ``sealing`` and ``create``; every store it builds shares the one
    database. Every agentflow backend builds a :class:`~agentflow.checkpoint.store.Store`;
    a third party's checkpoint-only backend (a bare
    :class:`~agentflow.checkpoint.base.Checkpointer`) may use the same harness for
    :class:`~agentflow.checkpoint.testing.CheckpointerConformance`, whose cases call
    only the checkpoint methods: the store and durable suites need a ``Store``. When
    ``factory`` is an importable class and ``kwargs`` are picklable,
    :attr:`recipe` lets a child process open the same store (for the
    multi-process races and the crash tests).

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
    #: ``commit_step`` writes nothing at all when the step or the claim refuses it
    #: (one transaction or script); False where the record is written first.
    atomic_steps: bool = True
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
    #: Overwrite the stored body of the record of (namespace, key) with bytes
    #: that are not a record.
    corrupt_run: Callable[[str | None, str], Awaitable[None]] | None = None
    #: What the database holds (tables, keys, collections, files: anything
    #: comparable), to check that a store opened with ``create=False`` creates nothing.
    contents: Callable[[], Awaitable[object]] | None = None
    #: The stored bytes of one part of a record or event, and their replacement:
    #: see :class:`~agentflow.durable.testing.DurableHarness`.
    read_part: PartReader | None = None
    write_part: PartWriter | None = None

    def open(
        self,
        *,
        namespace: str | None = None,
        redact: Redactor | None = None,
        codec: CheckpointCodec | None = None,
        sealing: KeyRing | None = None,
        create: bool = True,
    ) -> Store:
        """A new store on this database (use it with ``async with``);
        ``create=False`` opens it as a read-only caller does."""
        options: dict[str, Any] = {"namespace": namespace, "redact": redact}
        if codec is not None:
            options["codec"] = codec
        if sealing is not None:
            options["sealing"] = sealing
        if not create:
            options["create"] = False
        return cast(Store, self.factory(**self.kwargs, **options))

    def durable(self) -> DurableHarness:
        """This database as the durable suites see it: stores of records and events."""
        from agentflow.durable.testing import DurableHarness

        def opened(namespace: str | None, sealing: KeyRing | None = None) -> Store:
            return self.open(namespace=namespace, sealing=sealing)

        return DurableHarness(
            name=self.name,
            stores=opened,
            event_stores=opened,
            corrupt=self.corrupt_run,
            readers=lambda namespace: self.open(namespace=namespace, create=False),
            contents=self.contents,
            sealed_stores=opened,
            sealed_event_stores=opened,
            read_part=self.read_part,
            write_part=self.write_part,
        )

    @property
    def recipe(self) -> tuple[str, dict[str, Any]]:
        """``("module:Class", kwargs)`` to rebuild the factory in a child process."""
        factory = self.factory
        return f"{factory.__module__}:{factory.__qualname__}", dict(self.kwargs)


def open_from_recipe(recipe: tuple[str, dict[str, Any]], *, namespace: str | None = None) -> Store:
    """Open a store from :attr:`BackendHarness.recipe`, in any process."""
    path, kwargs = recipe
    module, _, name = path.partition(":")
    factory = getattr(importlib.import_module(module), name)
    opened: Store = factory(**kwargs, namespace=namespace)
    return opened


def make_checkpoint(thread: str = "t", step: int = 0, **fields: Any) -> Checkpoint:
    """A checkpoint with a small default state, for tests."""
    fields.setdefault("state", {"step": step})
    return Checkpoint(thread=thread, step=step, **fields)
