"""What the Redis durable stores share: the checkpointer's client, the layout version, errors.

A store takes the checkpointer's connection arguments (``url`` or an async
``client``, and ``prefix``) and holds an unopened
:class:`~agentflow.checkpoint.redis.RedisCheckpointer` for them: its argument
checks, its client (the one it creates never retries a command by itself)
and its mapping of redis-py errors. An injected client may retry; every
durable write carries a write id, so a script re-sent after a lost reply
answers as the first did and changes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

from agentflow.checkpoint.redis import RedisCheckpointer
from agentflow.checkpoint.redis.scripts import check_prefix
from agentflow.checkpoint.validation import validate_namespace
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.lifecycle import ClosingStore
from agentflow.durable.stores.redis_scripts import LAYOUT_VERSION, namespace_keys
from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    IncompatibleSchema,
    StoreClosed,
    StoreNotFound,
)

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["RedisStoreBase"]

T = TypeVar("T")


class RedisStoreBase(ClosingStore):
    """Namespace, client, layout check and lifecycle of a Redis durable store.

    ``url`` (the store creates, owns and closes the client) or ``client`` (an
    ``redis.asyncio.Redis`` with ``decode_responses=False``; it stays yours),
    ``prefix`` (the first part of every key, as the checkpointer's) and
    ``namespace`` (the tenant). The first call checks the namespace's durable
    layout version, setting it where there is none and refusing a newer one;
    with ``create=False`` a namespace without one raises
    :class:`~agentflow.errors.StoreNotFound` and no key is written.
    """

    kind: ClassVar[str] = "redis"

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: aioredis.Redis | None = None,
        prefix: str = "agentflow",
        namespace: str | None = None,
        create: bool = True,
        sealing: KeyRing | None = None,
    ) -> None:
        self._namespace = validate_namespace(namespace)
        self._sealing = sealing
        self._prefix = check_prefix(prefix)
        self._may_create = create
        self._server = RedisCheckpointer(url, client=client, prefix=prefix)
        self._client: aioredis.Redis = self._server._client
        self._version_key = namespace_keys(self._prefix, self._namespace)[2]
        self._layout_checked = False
        self._closed = False
        self._register()

    def _register(self) -> None:
        """Register the store's scripts on the client (no I/O)."""

    def __repr__(self) -> str:
        where, prefix, namespace = self._server._where, self._prefix, self._namespace
        return f"{type(self).__name__}({where!r}, {prefix=}, {namespace=})"

    @property
    def namespace(self) -> str:
        """The tenant this store reads and writes ("" for the default one)."""
        return self._namespace

    def _script(self, source: str) -> AsyncScript:
        return self._client.register_script(source)

    async def _redis(self, operation: str, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` once the layout is checked; redis-py errors become agentflow's."""
        if self._closed:
            raise StoreClosed(f"this {type(self).__name__} is closed")
        try:
            if not self._layout_checked:
                await self._check_layout()
            result = await job()
        except AgentflowError:
            raise
        except Exception as exc:
            error = self._server._driver_error(exc, operation)
            if error is None:
                raise
            if isinstance(error, CheckpointCorrupted):
                error = DurableCorrupted("checkpoint_row_invalid", str(error))
            raise error from exc
        return result

    async def _check_layout(self) -> None:
        """Set the layout version where there is none, in one atomic command."""
        where = f"namespace {self._namespace!r} under prefix {self._prefix!r}"
        found: Any
        if self._may_create:
            found = await self._client.set(self._version_key, LAYOUT_VERSION, nx=True, get=True)
        else:
            found = await self._client.get(self._version_key)
            if found is None:
                raise StoreNotFound(f"{where} has no durable Redis layout")
        if found is not None and found != LAYOUT_VERSION:
            if isinstance(found, bytes) and found.isdigit() and int(found) > int(LAYOUT_VERSION):
                raise IncompatibleSchema(
                    f"{where} has durable Redis layout {found.decode()}, newer than this "
                    f"agentflow's ({LAYOUT_VERSION.decode()}); upgrade agentflow"
                )
            raise CheckpointCorrupted(f"{where} holds an invalid durable layout version {found!r}")
        self._layout_checked = True

    async def close(self) -> None:
        """Close the client if this store created it; safe to call twice."""
        self._closed = True
        await self._server.close()
