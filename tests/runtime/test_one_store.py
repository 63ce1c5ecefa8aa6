"""The runtime on one store per database (issue 16): what it writes, where, and under which key.

* ``graph.compile(store)`` is the whole API on every backend; ``durable=`` is
  for a third-party checkpointer only, and a durable store of another
  namespace or database is refused before any I/O;
* ``idem_`` keys are unique per run (namespace, the run's own id, cycle, call
  id) and stable across a retry of one call, a crash and takeover included;
* an ``idempotent=True`` call writes nothing before it goes out and runs
  again under the same key after a crash; an at-most-once call's ``started``
  entry is its only write, its receipt riding the next write;
* a node that fails after a call still leaves its receipt on record (the
  lease flushes what it noted when it is released), replayed on resume.

Writes are counted by wrapping a store object's methods (:class:`Calls`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.base import Checkpoint, Checkpointer, ThreadInfo
from agentflow.checkpoint.memory import MemoryCheckpointer, MemoryStore
from agentflow.checkpoint.store import Store
from agentflow.durable import (
    DurableCheckpoint,
    OperationJournalEntry,
    OperationState,
    ReconciliationDecision,
    run_idempotency_key,
)
from agentflow.errors import InvalidArgument, StoreUnavailable
from agentflow.runtime import (
    END,
    START,
    CompiledGraph,
    Graph,
    NodeContext,
    NodeFailed,
    RunResult,
    StepClaimed,
    ToolCall,
)
from tests.runtime.conftest import RuntimeBackend, needs_sqlite
from tests.runtime.holders import hold

#: Short, so a dead holder's run is taken over quickly.
LEASE = timedelta(seconds=0.3)
#: The store methods that write (a read, a listing or a renewal is not counted).
WRITES = (
    "put",
    "start_run",
    "create",
    "claim",
    "progress",
    "record_operation",
    "record_operations",
    "commit_step",
    "suspend",
    "commit",
    "finalize_claimed",
    "finalize",
    "delete",
    "delete_thread",
    "append_once",
    "record_event_deliveries",
)
#: What delivering a run's checkpoint_created event costs where the step's commit does
#: not deliver it itself (memory, Redis, MongoDB, file): its append, then its record.
DELIVERY = ["append_once", "record_event_deliveries"]


class Calls:
    """The calls made to some async methods of one store object (wrapped on the instance).

    With ``dead`` set, every wrapped method raises :class:`StoreUnavailable`
    instead: the process that holds the object is gone, nothing it would
    write reaches the database any more.
    """

    def __init__(self, store: object, names: Sequence[str]) -> None:
        self.log: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.dead = False
        for name in names:
            setattr(store, name, self._wrap(name, getattr(store, name)))

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            if self.dead:
                raise StoreUnavailable(f"{name}: the process holding this store died")
            self.log.append((name, args, kwargs))
            return await method(*args, **kwargs)

        return wrapped

    def count(self, name: str) -> int:
        return sum(1 for called, _, _ in self.log if called == name)

    def names(self) -> list[str]:
        return [called for called, _, _ in self.log]

    def entries(self, name: str) -> list[list[OperationJournalEntry]]:
        """The journal entries each call of ``name`` (record_operations, commit_step) wrote."""
        return [
            list(args[2 if name == "commit_step" else 1]) for n, args, _ in self.log if n == name
        ]


class Tool:
    """A tool that keeps every call it gets; ``then`` runs inside the call (while it is out)."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.then: Callable[[ToolCall], Any] | None = None

    async def __call__(self, call: ToolCall) -> dict[str, Any]:
        self.calls.append(call)
        if self.then is not None:
            outcome = self.then(call)
            if asyncio.iscoroutine(outcome):
                await outcome
        return {"charged": call.arguments.get("cents", 0), "key": call.idempotency_key}

    @property
    def keys(self) -> list[str]:
        return [call.idempotency_key for call in self.calls]


def _charging(tool: Tool, *, idempotent: bool = False, calls: int = 1) -> Graph:
    """One node ``n`` making ``calls`` calls of ``tool``."""

    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        receipts = [
            await ctx.tool("charge", {"cents": i + 1}, tool, idempotent=idempotent)
            for i in range(calls)
        ]
        return {"receipts": receipts}

    return Graph("charging").add_node("n", charge).add_edge(START, "n")


def _failing_after_the_call(tool: Tool, failures: list[Exception], *, idempotent: bool) -> Graph:
    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        receipt = await ctx.tool("charge", {"cents": 7}, tool, idempotent=idempotent)
        if failures:
            raise failures.pop()
        return {"receipt": receipt}

    return Graph("fails-after").add_node("n", charge).add_edge(START, "n")


async def _key_of_first_call(store: Store, thread: str) -> str:
    """The key the runtime derives for the first call of node ``n`` at step 1, cycle 1."""
    record = await store.load(thread)
    assert record is not None
    return run_idempotency_key(store.namespace, record.trace_id, 1, "n/tool-1@1")


# -- compile(store) ------------------------------------------------------------


async def test_compile_takes_the_store_alone_on_every_backend(
    runtime_backend: RuntimeBackend,
) -> None:
    tool = Tool()
    async with runtime_backend.open() as store, runtime_backend.open() as again:
        compiled = _charging(tool).compile(store)
        assert compiled.durable is store
        result = await compiled.run({}, thread="t")
        assert result.status == "done" and len(tool.calls) == 1
        record = await again.load("t")  # the record lives beside the checkpoints
        assert record is not None and record.status.value == "completed"
        latest = await again.get("t")
        assert latest is not None and latest.done
        same = _charging(tool).compile(store, durable=store)  # given anyway: the same store
        assert same.durable is store
        beside = _charging(tool).compile(store, durable=again)  # same database and namespace
        assert (await beside.run({}, thread="u")).status == "done"
        assert (await store.load("u")) is not None


class ThirdParty(Checkpointer):
    """A checkpointer that is not an agentflow store (no records, no events)."""

    def __init__(self, inner: MemoryCheckpointer) -> None:
        self.inner = inner
        self.namespace = inner.namespace

    async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
        return await self.inner.put(cp, if_revision=if_revision)

    async def get(self, thread: str, step: int | None = None) -> Checkpoint | None:
        return await self.inner.get(thread, step)

    def history(
        self,
        thread: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> AsyncIterator[Checkpoint]:
        return self.inner.history(
            thread, after=after, before=before, limit=limit, newest_first=newest_first
        )

    async def list_threads(self, *, limit: int = 100, offset: int = 0) -> list[ThreadInfo]:
        return await self.inner.list_threads(limit=limit, offset=offset)

    async def delete_thread(self, thread: str) -> None:
        await self.inner.delete_thread(thread)

    async def prune(
        self, thread: str, *, before_step: int | None = None, older_than: str | None = None
    ) -> int:
        return await self.inner.prune(thread, before_step=before_step, older_than=older_than)

    async def close(self) -> None:
        await self.inner.close()


async def test_durable_is_for_a_third_party_checkpointer_of_the_same_namespace() -> None:
    shared = MemoryStore()
    checkpointer = ThirdParty(MemoryCheckpointer(store=shared, namespace="a"))
    assert not isinstance(checkpointer, Store)
    tool = Tool()
    with pytest.raises(InvalidArgument, match="keeps no durable records"):
        _charging(tool).compile(checkpointer)
    records = MemoryCheckpointer(store=shared, namespace="a")
    with pytest.raises(InvalidArgument, match="namespace"):
        _charging(tool).compile(checkpointer, durable=MemoryCheckpointer(store=shared))
    compiled = _charging(tool).compile(checkpointer, durable=records)
    assert (await compiled.run({}, thread="t")).status == "done"
    record = await records.load("t")
    assert record is not None and record.status.value == "completed"
    assert tool.keys == [await _key_of_first_call(records, "t")]


async def _refused_before_any_io(checkpointer: Store, durable: Store) -> None:
    """``compile(checkpointer, durable=durable)`` raises InvalidArgument, calling neither."""
    names = [*WRITES, "load", "get", "list_runs", "list_threads", "renew_claim", "replay"]
    mine, theirs = Calls(checkpointer, names), Calls(durable, names)
    with pytest.raises(InvalidArgument, match="beside its checkpoints"):
        _charging(Tool()).compile(checkpointer, durable=durable)
    assert mine.log == [] and theirs.log == []


async def test_a_durable_store_of_another_namespace_is_refused_on_every_backend(
    runtime_backend: RuntimeBackend,
) -> None:
    async with (
        runtime_backend.open(namespace="tenant-a") as mine,
        runtime_backend.open(namespace="tenant-b") as theirs,
        runtime_backend.open() as default,
    ):
        await _refused_before_any_io(mine, theirs)
        await _refused_before_any_io(mine, default)
        await _refused_before_any_io(default, mine)
        assert await mine.list_threads() == [] and (await mine.list_runs()).runs == []


async def test_a_durable_store_of_another_memory_store_is_refused_before_any_io() -> None:
    one, two = MemoryCheckpointer(store=MemoryStore()), MemoryCheckpointer(store=MemoryStore())
    assert one.database != two.database
    await _refused_before_any_io(one, two)
    await _refused_before_any_io(
        MemoryCheckpointer(store=MemoryStore(), namespace="x"),
        MemoryCheckpointer(store=MemoryStore(), namespace="x"),
    )


@needs_sqlite
async def test_a_durable_store_of_another_sqlite_file_is_refused_before_any_io(
    tmp_path: Path,
) -> None:
    from agentflow.checkpoint.sqlite import SqliteCheckpointer

    one, two = SqliteCheckpointer(tmp_path / "one.db"), SqliteCheckpointer(tmp_path / "two.db")
    assert isinstance(one, Store) and isinstance(two, Store)
    assert one.database != two.database
    await _refused_before_any_io(one, two)
    assert not (tmp_path / "one.db").exists() and not (tmp_path / "two.db").exists()
    same = SqliteCheckpointer(tmp_path / "one.db")
    async with one, same:
        assert _charging(Tool()).compile(one, durable=same).durable is same


# -- idempotency keys ----------------------------------------------------------


async def test_the_same_thread_in_two_namespaces_gets_two_keys_on_every_backend(
    runtime_backend: RuntimeBackend,
) -> None:
    tool = Tool()
    async with (
        runtime_backend.open(namespace="tenant-a") as a,
        runtime_backend.open(namespace="tenant-b") as b,
    ):
        for store in (a, b):
            assert (await _charging(tool).compile(store).run({}, thread="t")).status == "done"
        expected = [await _key_of_first_call(a, "t"), await _key_of_first_call(b, "t")]
    assert tool.keys == expected and len(set(tool.keys)) == 2


async def test_a_thread_deleted_and_run_again_gets_a_new_key_on_every_backend(
    runtime_backend: RuntimeBackend,
) -> None:
    tool = Tool()
    async with runtime_backend.open() as store:
        compiled = _charging(tool).compile(store)
        await compiled.run({}, thread="t")
        first = await store.load("t")
        await store.delete_thread("t")
        assert await store.load("t") is None and await store.get("t") is None
        assert (await compiled.run({}, thread="t")).status == "done"
        second = await store.load("t")
    assert first is not None and second is not None and first.trace_id != second.trace_id
    assert len(set(tool.keys)) == 2
    assert tool.keys[1] == run_idempotency_key(None, second.trace_id, 1, "n/tool-1@1")


@asynccontextmanager
async def _dying(backend: RuntimeBackend) -> AsyncIterator[tuple[Store, Calls]]:
    """A store whose process dies when told (``calls.dead = True``): from then on
    nothing it writes, renews or releases reaches the database."""
    async with backend.open() as store:
        names = [*WRITES, "renew_claim", "load", "get", "list_runs"]
        yield store, Calls(store, names)


async def _take_over(compiled: CompiledGraph, thread: str) -> RunResult:
    """Resume ``thread`` once the dead holder's lease lapsed (the store decides when)."""
    deadline = time.monotonic() + 20 * LEASE.total_seconds()
    while True:
        try:
            return await compiled.resume(thread)
        except StepClaimed:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(LEASE.total_seconds() / 3)


async def _crash_during_the_call(
    backend: RuntimeBackend, tool: Tool, *, idempotent: bool
) -> tuple[Store, CompiledGraph]:
    """Run ``_charging(tool)`` on a store whose process dies while the call is out;
    return a live store on the same database and a graph compiled on it."""
    async with _dying(backend) as (doomed, calls):

        def die(call: ToolCall) -> None:
            calls.dead = True
            tool.then = None  # the next process's call returns normally

        tool.then = die
        with pytest.raises(StoreUnavailable):
            await (
                _charging(tool, idempotent=idempotent)
                .compile(doomed, claim_ttl=LEASE)
                .run({}, thread="t")
            )
        calls.dead = False  # closing the object is the harness's business, not the run's
    live = backend.open()
    return live, _charging(tool, idempotent=idempotent).compile(live, claim_ttl=LEASE)


async def test_an_idempotent_call_runs_again_under_the_same_key_after_a_crash(
    runtime_backend: RuntimeBackend,
) -> None:
    tool = Tool()
    live, compiled = await _crash_during_the_call(runtime_backend, tool, idempotent=True)
    async with live:
        record = await live.load("t")
        assert record is not None and record.tool_journal == []  # nothing went before it
        result = await _take_over(compiled, "t")
        assert result.status == "done"
        expected = await _key_of_first_call(live, "t")
    assert len(tool.calls) == 2 and tool.keys == [expected, expected]
    assert tool.calls[0].operation_id == tool.calls[1].operation_id


async def test_an_at_most_once_call_is_retried_under_the_same_key_after_a_crash(
    runtime_backend: RuntimeBackend,
) -> None:
    tool = Tool()
    live, compiled = await _crash_during_the_call(runtime_backend, tool, idempotent=False)
    async with live:
        record = await live.load("t")
        assert record is not None
        assert [e.state for e in record.tool_journal] == [OperationState.STARTED]
        taken = await _take_over(compiled, "t")
        assert taken.status == "reconciliation_required" and len(tool.calls) == 1
        [observation] = taken.observations
        await compiled.reconcile(
            "t", observation.operation_id, ReconciliationDecision.retry(), attempt=1
        )
        result = await compiled.resume("t")
        assert result.status == "done"
        expected = await _key_of_first_call(live, "t")
    assert tool.keys == [expected, expected]
    assert [call.attempt for call in tool.calls] == [1, 2]


# -- what a call writes --------------------------------------------------------


async def _written_while_out(
    store: Store, reader: Store, thread: str, *, idempotent: bool
) -> tuple[list[str], list[OperationState]]:
    """What ``store`` wrote between the node's start and the moment its call is out,
    and the journal another store then reads."""
    calls, tool = Calls(store, WRITES), Tool()
    seen: list[tuple[list[str], list[OperationState]]] = []
    mark = 0

    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        nonlocal mark
        mark = len(calls.log)
        return {"r": await ctx.tool("charge", {}, tool, idempotent=idempotent)}

    async def out(call: ToolCall) -> None:
        record = await reader.load(thread)
        assert record is not None
        seen.append((calls.names()[mark:], [e.state for e in record.tool_journal]))

    tool.then = out
    graph = Graph("charging").add_node("n", charge).add_edge(START, "n")
    assert (await graph.compile(store).run({}, thread=thread)).status == "done"
    [written] = seen
    return written


async def test_an_idempotent_call_writes_nothing_before_it_goes_out_on_every_backend(
    runtime_backend: RuntimeBackend,
) -> None:
    async with runtime_backend.open() as store, runtime_backend.open() as reader:
        assert await _written_while_out(store, reader, "i", idempotent=True) == ([], [])
    async with runtime_backend.open() as store, runtime_backend.open() as reader:
        assert await _written_while_out(store, reader, "o", idempotent=False) == (
            ["record_operations"],
            [OperationState.STARTED],
        )


async def _counted(store: MemoryCheckpointer, graph: Graph) -> tuple[Calls, RunResult]:
    calls = Calls(store, WRITES)
    result = await graph.compile(store).run({"i": 0}, thread="t")
    return calls, result


async def test_twenty_at_most_once_calls_in_one_node_cost_twenty_writes_and_one_commit() -> None:
    store, tool = MemoryCheckpointer(), Tool()
    calls, result = await _counted(store, _charging(tool, calls=20))
    assert result.status == "done" and len(tool.calls) == 20
    assert calls.names() == [
        "start_run",  # step 0 (the input), its record and the claim, as one write
        *["record_operations"] * 20,  # each call's started entry, the receipt before it riding
        "commit_step",  # the step with the last receipt
        *DELIVERY,
        "finalize_claimed",
    ]
    sizes = [len(entries) for entries in calls.entries("record_operations")]
    assert sizes == [1] + [2] * 19
    for entries in calls.entries("record_operations")[1:]:
        assert [e.state for e in entries] == [OperationState.SUCCEEDED, OperationState.STARTED]
    [last] = calls.entries("commit_step")
    assert [e.state for e in last] == [OperationState.SUCCEEDED]


async def test_twenty_idempotent_calls_in_one_node_cost_one_commit() -> None:
    store, tool = MemoryCheckpointer(), Tool()
    calls, result = await _counted(store, _charging(tool, calls=20, idempotent=True))
    assert result.status == "done" and len(tool.calls) == 20
    assert calls.names() == ["start_run", "commit_step", *DELIVERY, "finalize_claimed"]
    [entries] = calls.entries("commit_step")
    succeeded = [e for e in entries if e.state is OperationState.SUCCEEDED]
    assert len({e.operation_id for e in succeeded}) == 20


async def test_a_step_of_one_call_is_one_started_write_and_one_step_commit() -> None:
    async def tick(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        await ctx.tool("charge", {"i": state["i"]}, Tool())
        return {"i": state["i"] + 1}

    graph = Graph("steps").add_node("tick", tick).add_edge(START, "tick")
    graph.add_conditional_edges("tick", lambda s: "tick" if s["i"] < 20 else END, ["tick", END])
    calls, result = await _counted(MemoryCheckpointer(), graph)
    assert result.status == "done" and result.state["i"] == 20
    assert calls.names() == [
        "start_run",
        "record_operations",
        "commit_step",
        *DELIVERY,
        *["record_operations", "commit_step"] * 19,
        "finalize_claimed",
    ]
    for entries in calls.entries("commit_step"):
        assert [e.state for e in entries] == [OperationState.SUCCEEDED]


# -- a node that fails after its call ------------------------------------------


@pytest.mark.parametrize("idempotent", [False, True], ids=["at-most-once", "idempotent"])
async def test_a_node_failing_after_its_call_leaves_the_receipt_to_replay_on_every_backend(
    runtime_backend: RuntimeBackend, idempotent: bool
) -> None:
    tool = Tool()
    graph = _failing_after_the_call(tool, [RuntimeError("after the charge")], idempotent=idempotent)
    async with runtime_backend.open() as store:
        compiled = graph.compile(store)
        with pytest.raises(NodeFailed):
            await compiled.run({}, thread="t")
        record: DurableCheckpoint | None = await store.load("t")
        assert record is not None  # the release flushed the receipt it had noted
        assert [e.state for e in record.tool_journal] == [OperationState.SUCCEEDED]
        assert record.claim_token is not None  # released (lapsed), not committed
        result = await compiled.resume("t")
    assert result.status == "done" and len(tool.calls) == 1
    assert result.state["receipt"] == {"charged": 7, "key": tool.keys[0]}
    ops = result.checkpoint.extra["runtime"]["operations"]
    assert [(o["state"], o["replayed"]) for o in ops] == [("succeeded", True)]


@pytest.mark.parametrize("idempotent", [False, True], ids=["at-most-once", "idempotent"])
async def test_calls_made_in_parallel_keep_every_receipt_on_every_backend(
    runtime_backend: RuntimeBackend, idempotent: bool
) -> None:
    """Receipts noted while another call's write is in flight ride a later write."""
    tool, failures = Tool(), [RuntimeError("after the calls")]

    async def jitter(call: ToolCall) -> None:
        await asyncio.sleep((5 - int(call.arguments["cents"])) / 500)  # they settle out of order

    tool.then = jitter

    async def charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        receipts = await asyncio.gather(
            *(ctx.tool("charge", {"cents": i}, tool, idempotent=idempotent) for i in range(5))
        )
        if failures:
            raise failures.pop()
        return {"receipts": receipts}

    graph = Graph("parallel").add_node("n", charge).add_edge(START, "n")
    async with runtime_backend.open() as store:
        compiled = graph.compile(store)
        with pytest.raises(NodeFailed):
            await compiled.run({}, thread="t")
        record = await store.load("t")
        assert record is not None
        assert [e.state for e in record.tool_journal] == [OperationState.SUCCEEDED] * 5
        result = await compiled.resume("t")
    assert result.status == "done" and len(tool.calls) == 5
    assert [r["charged"] for r in result.state["receipts"]] == [0, 1, 2, 3, 4]


async def test_a_run_whose_new_thread_is_claimed_while_it_starts_names_the_holder(
    runtime_backend: RuntimeBackend,
) -> None:
    """Where a store starts a run in several writes (step, record, claim), another
    process may claim the new record in between: ``run`` then raises StepClaimed
    naming it, and that process runs the thread (on the atomic stores nobody can)."""
    racer, tool = "racing-host:7:resumer", Tool()
    async with runtime_backend.open() as store, runtime_backend.open() as other:
        claim = store.claim
        raced: list[DurableCheckpoint] = []

        async def claimed_first(key: str, **options: Any) -> DurableCheckpoint:
            if not raced:  # the other process sees the new record and claims it first
                raced.append(await hold(other, key, racer, lease_ms=30_000))
            return await claim(key, **options)

        setattr(store, "claim", claimed_first)  # noqa: B010
        compiled = _charging(tool).compile(store)
        try:
            result = await compiled.run({}, thread="t")
        except StepClaimed as claimed:
            assert claimed.holder == racer and tool.calls == []
            stored = await other.load("t")
            assert stored is not None and [r.claim_token for r in raced] == [stored.claim_token]
        else:  # one write (SQLite, PostgreSQL, memory): there was no moment to race in
            assert raced == [] and result.status == "done" and len(tool.calls) == 1
