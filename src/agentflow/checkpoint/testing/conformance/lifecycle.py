"""Lifecycle and tenancy: close, async with, use after close, namespaces, and
opening without creating."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agentflow.checkpoint.base import Checkpointer
from agentflow.checkpoint.codec import JsonCodec
from agentflow.checkpoint.testing.conformance._support import history_of, thread_ids
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.errors import CheckpointConflict, InvalidArgument, StoreClosed, StoreNotFound

__all__ = ["LifecycleConformance"]

#: Every call of the protocol, as a function of an open checkpointer.
CALLS: dict[str, Callable[[Checkpointer], Awaitable[Any]]] = {
    "put": lambda cp: cp.put(make_checkpoint("t", 1)),
    "get": lambda cp: cp.get("t"),
    "get_step": lambda cp: cp.get("t", 0),
    "history": lambda cp: history_of(cp, "t"),
    "list_threads": lambda cp: cp.list_threads(),
    "list_threads_page": lambda cp: cp.list_threads_page(),
    "list_due": lambda cp: cp.list_due("2026-01-01T00:00:00Z"),
    "delete_thread": lambda cp: cp.delete_thread("t"),
    "prune": lambda cp: cp.prune("t", before_step=1),
}


class _BindsStore(JsonCodec):
    """JSON, but asking for the store's identity first, as a sealing codec does."""

    binds_store = True


@pytest.mark.asyncio
class LifecycleConformance:
    """How every backend opens, closes and keeps tenants apart."""

    async def test_is_a_checkpointer(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            assert isinstance(cp, Checkpointer)

    @pytest.mark.parametrize("call", sorted(CALLS))
    async def test_every_call_after_close_raises_store_closed(
        self, harness: BackendHarness, call: str
    ) -> None:
        cp = harness.open()
        await cp.put(make_checkpoint("t", 0))
        await cp.close()
        with pytest.raises(StoreClosed) as info:
            await CALLS[call](cp)
        assert info.value.code == "store_closed"
        async with harness.open() as again:
            assert await again.get("t") is not None

    async def test_close_is_idempotent_and_async_with_closes(self, harness: BackendHarness) -> None:
        cp = harness.open()
        await cp.put(make_checkpoint("t", 0))
        await cp.close()
        await cp.close()
        async with harness.open() as scoped:
            assert await scoped.get("t") is not None
        with pytest.raises(StoreClosed):
            await scoped.get("t")
        await scoped.close()

    @pytest.mark.parametrize("codec", ["json", "binds_store"])
    @pytest.mark.parametrize("call", sorted(CALLS))
    async def test_without_create_a_missing_store_is_refused_and_nothing_is_created(
        self, harness: BackendHarness, call: str, codec: str
    ) -> None:
        codecs = {"json": JsonCodec(), "binds_store": _BindsStore()}
        for _ in range(2):  # the first refusal left nothing the second open could find
            # Refused when opened (nothing to open) or on the first call (the server says).
            with pytest.raises(StoreNotFound) as info:
                async with harness.open(create=False, codec=codecs[codec]) as cp:
                    await CALLS[call](cp)
            assert info.value.code == "store_not_found"
        async with harness.open() as creator:
            assert await creator.get("t") is None

    async def test_without_create_an_existing_store_is_read_and_written(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as creator:
            await creator.put(make_checkpoint("t", 0))
        async with harness.open(create=False) as cp:
            assert [c.step for c in await history_of(cp, "t")] == [0]
            assert await thread_ids(cp) == ["t"]
            await cp.put(make_checkpoint("t", 1), if_revision=0)
            latest = await cp.get("t")
            assert latest is not None and latest.step == 1
            assert (await cp.list_threads_page(limit=1)).threads[0].thread == "t"

    async def test_namespaces_never_see_each_other(self, harness: BackendHarness) -> None:
        async with (
            harness.open(namespace="acme") as acme,
            harness.open(namespace="globex") as globex,
            harness.open() as default,
        ):
            await acme.put(make_checkpoint("shared", 0, state={"owner": "acme"}))
            await acme.put(make_checkpoint("shared", 1, state={"owner": "acme"}))
            await acme.put(make_checkpoint("only-acme", 0))
            await globex.put(make_checkpoint("shared", 0, state={"owner": "globex"}))
            await default.put(make_checkpoint("dflt", 0))

            got = await globex.get("shared")
            assert got is not None and got.state == {"owner": "globex"} and got.revision == 1
            assert await globex.get("only-acme") is None
            assert await thread_ids(acme) == ["only-acme", "shared"]
            assert await thread_ids(globex) == ["shared"]
            assert [i.thread for i in (await default.list_threads_page()).threads] == ["dflt"]
            assert [c.step for c in await history_of(globex, "shared")] == [0]

            with pytest.raises(CheckpointConflict):
                await globex.put(make_checkpoint("shared", 1), if_revision=1)
            assert await globex.prune("shared", before_step=10) == 1
            await globex.delete_thread("only-acme")
            assert [c.step for c in await history_of(acme, "shared")] == [0, 1]
            assert await acme.get("only-acme") is not None
            await acme.delete_thread("shared")
            assert await default.get("dflt") is not None

    async def test_bad_namespace_is_refused(self, harness: BackendHarness) -> None:
        for namespace in ("", "a\x00b", "\udfff", 5):
            with pytest.raises(InvalidArgument):
                harness.open(namespace=namespace)  # type: ignore[arg-type]
