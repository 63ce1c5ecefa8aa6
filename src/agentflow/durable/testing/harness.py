"""How a durable backend presents itself to the conformance suites, and test records."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agentflow.durable.enums import ToolIdempotency
from agentflow.durable.run.definition import RUN_DEFINITION_SCHEMA
from agentflow.durable.run.journal import OperationJournalEntry
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.store import DurableEventStore, DurableStore
from agentflow.durable.wire.digests import tool_request_digest
from agentflow.durable.wire.ids import tool_idempotency_key, tool_operation_id

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = [
    "DurableHarness",
    "PartReader",
    "PartWriter",
    "make_record",
    "make_run_definition",
    "make_tool_entry",
]

#: ``read(namespace, key, part)``: the bytes the backend holds for one part.
PartReader = Callable[[str | None, str, str], Awaitable[bytes]]
#: ``write(namespace, key, part, data)``: replace those bytes behind the store's back.
PartWriter = Callable[[str | None, str, str, bytes], Awaitable[None]]


@dataclass
class DurableHarness:
    """One fresh, empty backend and the way to open stores on it.

    ``stores(namespace)`` and ``event_stores(namespace)`` open stores that
    share the backend; every store opened is closed by the suite.
    ``corrupt(namespace, key)``, when given, overwrites the stored body of a
    record with bytes that are not a record, to check reads fail closed.
    ``readers(namespace)`` opens a store with ``create=False`` on the same
    backend, and ``contents()`` returns what the backend holds (tables, keys,
    collections, files: anything comparable), to check such a store creates
    nothing.

    ``sealed_stores(namespace, sealing)`` and ``sealed_event_stores(namespace,
    sealing)`` open stores with a key ring (None: plain), on the same backend.
    ``read_part`` and ``write_part`` reach one stored part directly in the
    database, keys or files: ``part`` is ``"body"``, a journal entry
    (``"tool.0"``, ``"model.1"``: :func:`~agentflow.checkpoint.envelope.entry_part`)
    or ``"event"`` (then ``key`` is the event id). They give the bytes the
    backend keeps for that part, its framing included where it keeps the part
    inside a larger value (SQLite keeps a journal in one JSON array column: the
    whole column is the part's bytes), so damage made there is damage a disk,
    a backup or an operator could make.
    """

    name: str
    stores: Callable[[str | None], DurableStore]
    event_stores: Callable[[str | None], DurableEventStore]
    corrupt: Callable[[str | None, str], Awaitable[None]] | None = None
    readers: Callable[[str | None], DurableStore] | None = None
    contents: Callable[[], Awaitable[object]] | None = None
    sealed_stores: Callable[[str | None, KeyRing | None], DurableStore] | None = None
    sealed_event_stores: Callable[[str | None, KeyRing | None], DurableEventStore] | None = None
    read_part: PartReader | None = None
    write_part: PartWriter | None = None

    def store(
        self, namespace: str | None = None, *, sealing: KeyRing | None = None
    ) -> AbstractAsyncContextManager[DurableStore]:
        """A store on this backend (sealed with ``sealing``), closed when the block ends."""
        if sealing is None:
            return _closing(self.stores(namespace))
        if self.sealed_stores is None:
            raise NotImplementedError(f"the {self.name} harness opens no sealed store")
        return _closing(self.sealed_stores(namespace, sealing))

    def reader(self, namespace: str | None = None) -> AbstractAsyncContextManager[DurableStore]:
        """A store opened with ``create=False`` on this backend, closed when the block ends."""
        if self.readers is None:
            raise NotImplementedError(f"the {self.name} harness opens no store without create")
        return _closing(self.readers(namespace))

    def events(
        self, namespace: str | None = None, *, sealing: KeyRing | None = None
    ) -> AbstractAsyncContextManager[DurableEventStore]:
        """An event store on this backend (sealed with ``sealing``), closed when the block ends."""
        if sealing is None:
            return _closing(self.event_stores(namespace))
        if self.sealed_event_stores is None:
            raise NotImplementedError(f"the {self.name} harness opens no sealed event store")
        return _closing(self.sealed_event_stores(namespace, sealing))

    def parts(self) -> tuple[PartReader, PartWriter]:
        """The raw part hooks, which a suite of stored-bytes tests needs."""
        if self.read_part is None or self.write_part is None:
            raise NotImplementedError(f"the {self.name} harness reaches no stored part")
        return self.read_part, self.write_part


_Store = TypeVar("_Store", DurableStore, DurableEventStore)


@asynccontextmanager
async def _closing(store: _Store) -> AsyncIterator[_Store]:
    try:
        yield store
    finally:
        await store.close()


def make_run_definition(**overrides: Any) -> dict[str, Any]:
    """A small valid run definition (every closed member present)."""
    definition: dict[str, Any] = {
        "schema_version": RUN_DEFINITION_SCHEMA,
        "agent": {"name": "ledger-agent", "type": None},
        "root_input": "Settle invoice 7.",
        "compiled_prompt": "You keep the ledger.",
        "initial_messages": [],
        "initial_shared_state": {},
        "run_metadata": {},
        "context_ref": None,
        "model": {"backend": "fake", "model_id": "fake-1", "settings": {}},
        "credential_slots": [],
        "runtime_controls": {"max_cycles": 5},
        "tools": [],
        "tool_policy": {"allowed_tools": None, "disallowed_tools": []},
        "checkpoint_policy": {
            "ambiguous_model_policy": "require_reconciliation",
            "ambiguous_tool_policy": "require_reconciliation",
            "max_extension_state_bytes": 262_144,
        },
        "budget_limits": None,
        "output_schema": None,
        "workspace_ref": None,
        "session_ref": None,
        "extensions": [],
        "capability_refs": {},
    }
    definition.update(overrides)
    return definition


def make_record(key: str = "run-1", **fields: Any) -> DurableCheckpoint:
    """A fresh, unclaimed, running record under ``key``."""
    return DurableCheckpoint.new(
        fields.pop("run_definition", None) or make_run_definition(),
        key,
        task_id=fields.pop("task_id", "task-1"),
        root_run_id=fields.pop("root_run_id", f"root-{key}"),
        trace_id=fields.pop("trace_id", "trace-1"),
        **fields,
    )


def make_tool_entry(
    key: str,
    cycle_index: int,
    position: int = 1,
    *,
    tool_name: str = "charge",
    arguments: dict[str, Any] | None = None,
    support: ToolIdempotency = ToolIdempotency.UNSUPPORTED,
) -> OperationJournalEntry:
    """A planned tool call with its real idempotency key and request digest."""
    call_id = f"call_{position}"
    arguments = {"amount": 12} if arguments is None else arguments
    idempotency_key = tool_idempotency_key(key, cycle_index, call_id)
    return OperationJournalEntry.tool(
        tool_operation_id(cycle_index, position),
        cycle_index,
        tool_request_digest(call_id, tool_name, arguments, idempotency_key),
        tool_call_id=call_id,
        tool_name=tool_name,
        arguments=arguments,
        idempotency_key=idempotency_key,
        idempotency_support=support,
    )
