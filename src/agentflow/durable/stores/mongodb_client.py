"""What the MongoDB durable stores share: the checkpointer's client, the collections, the layout.

A store takes the checkpointer's connection arguments (``uri`` or an
injected ``client``, ``database``, ``collection``, ``journal``) and holds an
unopened :class:`~agentflow.checkpoint.mongodb.MongoCheckpointer` for them:
its argument checks, its client (created from ``uri`` and closed with the
store, or injected and left open), its write concern (journaled unless
``journal=False``) and its mapping of PyMongo's errors. The durable
collections sit beside the checkpointer's, ``<collection>_durable_runs`` and
``<collection>_durable_events``.

The first call of a store reads the layout version. Where there is none it
refuses collections with a default collation (keys must compare as UTF-8
bytes), creates the indexes and records version 1; a newer version is
refused with :class:`~agentflow.errors.IncompatibleSchema`, a damaged one
with :class:`~agentflow.errors.CheckpointCorrupted`. A current version
costs one read and creates nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar, Final, TypeVar

from pymongo import AsyncMongoClient, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection

from agentflow.checkpoint.mongodb import MongoCheckpointer
from agentflow.checkpoint.mongodb.documents import Document, plain
from agentflow.checkpoint.mongodb.errors import driver_error
from agentflow.checkpoint.validation import validate_namespace
from agentflow.durable.errors import DurableCorrupted, DurableError
from agentflow.durable.lifecycle import ClosingStore
from agentflow.durable.stores.mongodb_documents import EVENT_INDEXES, LAYOUT_ID, RUN_INDEXES
from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    IncompatibleSchema,
    InvalidArgument,
    StoreClosed,
    StoreNotFound,
)

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["LAYOUT_VERSION", "MongoStoreBase", "check_text"]

T = TypeVar("T")

LAYOUT_VERSION: Final = 1


def check_text(text: str, code: str, what: str) -> str:
    """A caller's string BSON can hold; a lone surrogate is refused with ``code``."""
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        raise DurableError(code, f"{what} is not valid Unicode") from exc
    return text


class MongoStoreBase(ClosingStore):
    """Namespace, collections, layout check and lifecycle of a MongoDB durable store.

    ``uri`` (the store creates, owns and closes the client) or ``client`` (an
    ``AsyncMongoClient``; it stays yours), ``database`` and ``collection``
    (the checkpointer's; the durable collections are named after it),
    ``namespace`` (the tenant) and ``journal`` (wait for the journal on every
    write, as the checkpointer does). With ``create=False`` a database without
    the durable layout raises :class:`~agentflow.errors.StoreNotFound` and no
    collection, index or document is created.
    """

    kind: ClassVar[str] = "mongodb"

    def __init__(
        self,
        uri: str = "mongodb://127.0.0.1:27017",
        *,
        client: AsyncMongoClient[Document] | None = None,
        database: str = "agentflow",
        collection: str = "checkpoints",
        namespace: str | None = None,
        journal: bool = True,
        create: bool = True,
        sealing: KeyRing | None = None,
    ) -> None:
        self._namespace = validate_namespace(namespace)
        self._sealing = sealing
        self._may_create = create
        self._server = MongoCheckpointer(
            uri, client=client, database=database, collection=collection, journal=journal
        )
        checkpoints = self._server._coll
        concern = checkpoints.write_concern
        self._runs: AsyncCollection[Document] = checkpoints.database.get_collection(
            f"{collection}_durable_runs", write_concern=concern
        )
        self._events: AsyncCollection[Document] = checkpoints.database.get_collection(
            f"{collection}_durable_events", write_concern=concern
        )
        self._layout_lock = asyncio.Lock()
        self._layout_checked = False
        self._closed = False

    def __repr__(self) -> str:
        where, runs, namespace = self._server._where, self._runs.full_name, self._namespace
        return f"{type(self).__name__}({where!r}, {runs=}, {namespace=})"

    @property
    def namespace(self) -> str:
        """The tenant this store reads and writes ("" for the default one)."""
        return self._namespace

    async def _call(self, operation: str, job: Callable[[], Awaitable[T]]) -> T:
        """Run ``job`` once the layout is checked; PyMongo's errors become agentflow's."""
        if self._closed:
            raise StoreClosed(f"this {type(self).__name__} is closed")
        try:
            if not self._layout_checked:
                await self._check_layout()
            return await job()
        except AgentflowError:
            raise
        except Exception as exc:
            error = driver_error(exc, operation, self._server._where)
            if error is None:
                raise
            if isinstance(error, CheckpointCorrupted):
                error = DurableCorrupted("checkpoint_row_invalid", str(error))
            raise error from exc

    async def _check_layout(self) -> None:
        async with self._layout_lock:
            if self._layout_checked:
                return
            found = await self._runs.find_one({"_id": LAYOUT_ID})
            if found is None and not self._may_create:
                raise StoreNotFound(f"{self._runs.full_name!r} has no durable layout")
            if found is None:
                await self._create_layout()
                found = await self._runs.find_one_and_update(
                    {"_id": LAYOUT_ID},
                    {"$setOnInsert": {"v": LAYOUT_VERSION}},
                    upsert=True,
                    return_document=ReturnDocument.AFTER,
                )
            version = plain((found or {}).get("v"))
            if version != LAYOUT_VERSION:
                where = f"MongoDB collection {self._runs.full_name!r}"
                if type(version) is int and version > LAYOUT_VERSION:
                    raise IncompatibleSchema(
                        f"{where} has durable layout version {version}, newer than this "
                        f"agentflow's ({LAYOUT_VERSION}); upgrade agentflow"
                    )
                raise CheckpointCorrupted(f"{where} holds an invalid durable layout version")
            self._layout_checked = True

    async def _create_layout(self) -> None:
        """Create both collections' indexes, refusing a collection with a default collation."""
        names = [self._runs.name, self._events.name]
        listing = await self._runs.database.list_collections(filter={"name": {"$in": names}})
        for info in await listing.to_list():
            collation = info.get("options", {}).get("collation")
            if collation and collation.get("locale") != "simple":
                raise InvalidArgument(
                    f"collection {info.get('name')!r} has a default collation; "
                    "agentflow needs the simple (binary) collation"
                )
        await self._runs.create_indexes(RUN_INDEXES)
        await self._events.create_indexes(EVENT_INDEXES)

    async def close(self) -> None:
        """Close the client if this store created it; safe to call twice."""
        self._closed = True
        await self._server.close()
