"""``AgentflowSaver``: LangGraph's ``BaseCheckpointSaver`` over any agentflow Checkpointer."""

from __future__ import annotations

import random
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.base import Checkpoint as LangGraphCheckpoint

from agentflow.checkpoint.base import Checkpointer, with_defaults
from agentflow.errors import InvalidArgument
from agentflow.integrations.langgraph import maintenance
from agentflow.integrations.langgraph.bridge import LoopBridge
from agentflow.integrations.langgraph.delta import delta_channel_history
from agentflow.integrations.langgraph.records import (
    check_namespace,
    check_thread_id,
    checkpoint_step,
    namespace_thread,
)
from agentflow.integrations.langgraph.schema_types import calling_graphs
from agentflow.integrations.langgraph.serde import StrictSerializer
from agentflow.integrations.langgraph.store import Pair, RecordStore
from agentflow.integrations.langgraph.tuples import TupleCodec
from agentflow.integrations.langgraph.values import Serde, ValueCodec

__all__ = ["AgentflowSaver"]


def _keys(config: RunnableConfig) -> tuple[str, str | None, str | None]:
    """``(thread_id, checkpoint_ns or None when absent, checkpoint_id or None)``."""
    configurable = config.get("configurable") or {}
    if "thread_id" not in configurable:
        raise InvalidArgument("a LangGraph config needs configurable.thread_id")
    thread_id = check_thread_id(configurable["thread_id"])
    ns = configurable.get("checkpoint_ns")
    checkpoint_id = configurable.get("checkpoint_id") or None
    return thread_id, None if ns is None else check_namespace(ns), checkpoint_id


class AgentflowSaver(BaseCheckpointSaver[str]):
    """Stores LangGraph checkpoints in an agentflow ``Checkpointer`` of any backend.

    Tenancy is the checkpointer's ``namespace``: bind one per tenant. Values
    that are exact JSON are stored as JSON; others with LangGraph's msgpack
    encoding. Reading rebuilds only the types the application vouches for
    (:class:`~agentflow.integrations.langgraph.KnownTypes`: the defaults,
    ``allowed=``, the schemas of every graph that runs with this saver, the
    types this saver wrote); a value of any other type is never imported or
    called and reads back as its stored data, as the stock savers give it.

    ``verify_writes`` applies to a custom ``serde``: each packed value is
    decoded once as it is written, so bytes that would not read back fail the
    write. The default serializer always reads its own output back, building
    nothing. The saver does not own ``checkpointer``: close it yourself. See
    docs/langgraph.md for the layout, the security model and the cost of each
    method.
    """

    def __init__(
        self,
        checkpointer: Checkpointer,
        *,
        allowed: Iterable[tuple[str, ...] | type] = (),
        serde: Serde | None = None,
        verify_writes: bool = True,
    ) -> None:
        super().__init__(serde=serde or StrictSerializer(allowed=allowed))
        self.checkpointer = with_defaults(checkpointer)
        self._strict = self.serde if isinstance(self.serde, StrictSerializer) else None
        verify = verify_writes and self._strict is None
        values = ValueCodec(self.serde, verify=verify)
        self._store = RecordStore(self.checkpointer, TupleCodec(values))
        self._bridge = LoopBridge()

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> AgentflowSaver:
        """This saver, now also rebuilding ``extra_allowlist`` (LangGraph passes
        a compiled graph's schema types in strict mode)."""
        if self._strict is not None:
            self._strict.with_allowlist(extra_allowlist)
        return self

    def _learn_caller(self) -> None:
        """Learn the schema types of the graphs whose methods called the saver
        (LangGraph hands them over only in strict mode)."""
        if self._strict is not None:
            for graph in calling_graphs(skip=2):
                self._strict.learn_graph(graph)

    def get_next_version(self, current: str | int | float | None, channel: None) -> str:
        """LangGraph's string versions (as its SQL savers write), so copied
        threads keep comparing versions of one type."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- async API -------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: LangGraphCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns, parent_id = _keys(config)
        ns = ns or ""
        thread = namespace_thread(thread_id, ns)
        await self._store.register(thread_id, ns)
        cp = self._store.codec.checkpoint_record(
            thread,
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint=checkpoint,
            metadata=get_serializable_checkpoint_metadata(config, metadata),
            parent_id=parent_id,
        )
        await self._store.put_checkpoint(cp, checkpoint["id"])
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, ns, checkpoint_id = _keys(config)
        if checkpoint_id is None:
            raise InvalidArgument("put_writes needs configurable.checkpoint_id")
        checkpoint_step(checkpoint_id)
        if not writes:
            return
        ns = ns or ""
        await self._store.register(thread_id, ns)
        entries = self._store.codec.write_entries(writes, task_id, task_path)
        thread = namespace_thread(thread_id, ns)
        await self._store.put_writes(thread, thread_id, ns, checkpoint_id, entries)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._learn_caller()
        thread_id, ns, checkpoint_id = _keys(config)
        thread = namespace_thread(thread_id, ns or "")
        if checkpoint_id is None:
            pair = await self._store.latest(thread)
        else:
            pair = await self._store.by_id(thread, checkpoint_id)
        return None if pair is None else self._store.codec.to_tuple(*pair)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Newest first within each (thread, namespace); with no thread in
        ``config``, every LangGraph thread of the namespace, thread by thread."""
        self._learn_caller()
        bound = None
        if before is not None and (
            before_id := (before.get("configurable") or {}).get("checkpoint_id")
        ):
            bound = checkpoint_step(before_id)
        only_id = None
        if config is None:
            threads = self._store.threads()
        else:
            thread_id, ns, only_id = _keys(config)
            namespaces = [ns] if ns is not None else await self._store.namespaces(thread_id)
            threads = _iterate([namespace_thread(thread_id, n) for n in namespaces])
        wanted = limit if not filter and only_id is None else None
        pairs = self._newest(threads, merge=config is not None, before=bound, wanted=wanted)
        left = limit
        try:
            async for cp, writes in pairs:
                if left is not None and left <= 0:
                    return
                if only_id is not None and cp.checkpoint_id != only_id:
                    continue
                if filter and not _matches(self._store.codec.metadata(cp), filter):
                    continue
                if left is not None:
                    left -= 1
                yield self._store.codec.to_tuple(cp, writes)
        finally:
            await pairs.aclose()

    async def _newest(
        self, threads: AsyncIterator[str], *, merge: bool, before: int | None, wanted: int | None
    ) -> AsyncGenerator[Pair, None]:
        """Newest-first pairs per thread, or of all ``threads`` merged by id (each
        read in pages, newest first, only as far as the listing goes)."""
        store = self._store
        if not merge:
            async for thread in threads:
                async for pair in store.newest_pairs(thread, before=before, wanted=wanted):
                    yield pair
            return
        streams = [
            store.newest_pairs(thread, before=before, wanted=wanted) async for thread in threads
        ]
        heads: list[tuple[Pair, AsyncGenerator[Pair, None]]] = []
        try:
            for stream in streams:
                first = await anext(stream, None)
                if first is not None:
                    heads.append((first, stream))
            while heads:
                newest = max(range(len(heads)), key=lambda i: heads[i][0][0].checkpoint_id)
                pair, stream = heads[newest]
                yield pair
                following = await anext(stream, None)
                if following is None:
                    del heads[newest]
                else:
                    heads[newest] = (following, stream)
        finally:
            for stream in streams:
                await stream.aclose()

    async def adelete_thread(self, thread_id: str) -> None:
        await maintenance.delete_thread(self._store, check_thread_id(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await maintenance.delete_for_runs(self._store, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await maintenance.copy_thread(
            self._store, check_thread_id(source_thread_id), check_thread_id(target_thread_id)
        )

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await maintenance.prune(self._store, [check_thread_id(t) for t in thread_ids], strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        thread_id, ns, checkpoint_id = _keys(config)
        thread = namespace_thread(thread_id, ns or "")
        return await delta_channel_history(self._store, thread, checkpoint_id, channels)

    # -- sync API: the same coroutines, run on the saver's loop ----------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: LangGraphCheckpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._bridge.run(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._bridge.run(self.aput_writes(config, writes, task_id, task_path))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._learn_caller()
        return self._bridge.run(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        self._learn_caller()

        async def collect() -> list[CheckpointTuple]:
            listed = self.alist(config, filter=filter, before=before, limit=limit)
            return [tup async for tup in listed]

        return iter(self._bridge.run(collect()))

    def delete_thread(self, thread_id: str) -> None:
        self._bridge.run(self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._bridge.run(self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._bridge.run(self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._bridge.run(self.aprune(thread_ids, strategy=strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._bridge.run(self.aget_delta_channel_history(config=config, channels=channels))


def _matches(metadata: Mapping[str, Any], query: Mapping[str, Any]) -> bool:
    return all(metadata.get(key) == value for key, value in query.items())


async def _iterate(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        yield item
