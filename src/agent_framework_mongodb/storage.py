"""``MongoDBCheckpointStorage``: Agent Framework checkpoints in one scoped MongoDB run.

The framework's protocol passes only a checkpoint or an ID, so the storage is
bound to one (tenant, application, workflow, session) scope and every query
carries that scope in full; an ID alone never selects a document. Order is
the per-scope ``sequence`` allocated atomically at save time, never the
timestamp or the iteration count (several checkpoints share an iteration).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from agent_framework import CheckpointID, CheckpointStorage, WorkflowCheckpoint
from pymongo import AsyncMongoClient

from agent_framework_mongodb.codec import CheckpointCodec
from agent_framework_mongodb.documents import (
    checkpoint_from_document,
    encode_checkpoint,
    stored_position,
)
from agent_framework_mongodb.errors import (
    MongoDBAuthorizationError,
    MongoDBCheckpointNotFoundError,
    MongoDBConfigurationError,
)
from agent_framework_mongodb.indexes import (
    CHECKPOINT_KIND,
    COUNTER_KIND,
    INDEX_SPECS,
    index_problems,
)
from agent_framework_mongodb.options import MongoDBCheckpointStorageOptions, storable_text
from agent_framework_mongodb.paging import (
    MongoDBCheckpointClearResult,
    MongoDBCheckpointPage,
    decode_cursor,
    encode_cursor,
)
from agent_framework_mongodb.telemetry import Completion, driver_errors
from agent_framework_mongodb.writes import CheckpointWriter

__all__ = ["MongoDBCheckpointStorage"]

_ORDER_FIELDS = {"_id": 0, "sequence": 1, "checkpoint_id": 1}
# Fields a page never reads (decoding checks the gates, the scope and the payload).
_PAGE_FIELDS = {"_id": 0, "payload_hash": 0, "created_at": 0, "expires_at": 0}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while one page is decoded, synchronously.

    A page's decoded checkpoints are hundreds of fresh containers each, all
    alive until the page is returned, so the collector would otherwise run
    generation after generation over objects that cannot be garbage yet
    (about a quarter of paging time, measured). The block never awaits, so no
    other coroutine runs while it is paused, and it is re-enabled only if it
    was enabled before: a caller that disabled the collector keeps it off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class MongoDBCheckpointStorage(CheckpointStorage):
    """Durable, scoped, paginated Agent Framework checkpoint storage on MongoDB.

    Pass exactly one of ``connection_string`` (the storage then owns its
    ``AsyncMongoClient`` and closes it in :meth:`close`), ``client`` or
    ``collection`` (both stay owned by the caller). Nothing is sent to MongoDB
    during construction, and indexes are only ever created by
    :meth:`ensure_indexes`.
    """

    def __init__(
        self,
        options: MongoDBCheckpointStorageOptions,
        *,
        connection_string: str | None = None,
        client: AsyncMongoClient[dict[str, Any]] | None = None,
        collection: Any = None,
    ) -> None:
        if not isinstance(options, MongoDBCheckpointStorageOptions):
            raise MongoDBConfigurationError("options must be MongoDBCheckpointStorageOptions")
        if sum(x is not None for x in (connection_string, client, collection)) != 1:
            raise MongoDBConfigurationError(
                "pass exactly one of connection_string, client or collection"
            )
        self._options = options
        self._codec = CheckpointCodec(options.allowed_checkpoint_types)
        self._scope = options.scope_filter()
        self._owned_client: AsyncMongoClient[dict[str, Any]] | None = None
        self._closed = False
        if connection_string is not None:
            if not isinstance(connection_string, str) or not connection_string:
                raise MongoDBConfigurationError("connection_string must be a non-empty string")
            try:
                self._owned_client = AsyncMongoClient(connection_string)
            except Exception as exc:  # invalid URI or options: never echo it
                raise MongoDBConfigurationError("connection_string is not valid") from exc
            client = self._owned_client
        if client is not None:
            collection = client[options.database_name][options.collection_name]
        self._collection = collection
        self._checkpoint_filter = {"_kind": CHECKPOINT_KIND, **self._scope}
        # Built once: save and clear_run use them on every call.
        self._counter = {"_id": options.counter_id(), "_kind": COUNTER_KIND, **self._scope}
        self._writer = CheckpointWriter(collection, options, self._checkpoint_filter, self._counter)

    @property
    def options(self) -> MongoDBCheckpointStorageOptions:
        """The immutable scope and settings this storage is bound to."""
        return self._options

    # ----------------------------------------------------------- lifecycle

    async def close(self) -> None:
        """Close the client this storage created, once; injected clients are left open."""
        if self._owned_client is None or self._closed:
            return
        self._closed = True
        await self._owned_client.close()

    async def __aenter__(self) -> MongoDBCheckpointStorage:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------ protocol methods

    async def save(self, checkpoint: WorkflowCheckpoint) -> CheckpointID:
        """Store an immutable snapshot of ``checkpoint`` and return its ID.

        The state is validated and encoded before the first await (so later
        mutation by the caller cannot change what is stored) and before any
        sequence is allocated. Saving the same public state under the same ID
        again returns the ID; different state under a stored ID raises
        ``MongoDBConcurrencyError``. A retry of a save whose outcome this
        storage did not learn (a transient error or a cancellation) first
        looks the ID up, so an identical retry spends no new sequence.
        """
        with Completion("save") as done:
            encoded = encode_checkpoint(checkpoint, self._options, self._codec)
            await self._writer.write(checkpoint, encoded)
            done.count = 1
            return checkpoint.checkpoint_id

    async def load(self, checkpoint_id: CheckpointID) -> WorkflowCheckpoint:
        """A fresh copy of the checkpoint; ``MongoDBCheckpointNotFoundError`` if it is absent."""
        with Completion("load") as done:
            _check_id(checkpoint_id)
            with driver_errors(write=False):
                document = await self._collection.find_one(
                    {**self._checkpoint_filter, "checkpoint_id": checkpoint_id}
                )
            if document is None:
                raise MongoDBCheckpointNotFoundError("no checkpoint with that ID in this run")
            checkpoint = checkpoint_from_document(document, self._options, self._codec)
            done.count = 1
            return checkpoint

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """Every checkpoint of the bound run in (sequence, checkpoint_id) order, page by page."""
        with Completion("list_checkpoints") as done:
            checkpoints: list[WorkflowCheckpoint] = []
            cursor: str | None = None
            while True:
                page = await self.list_checkpoint_page(workflow_name=workflow_name, cursor=cursor)
                checkpoints.extend(page.checkpoints)
                done.count = len(checkpoints)
                if page.next_cursor is None:
                    return checkpoints
                cursor = page.next_cursor

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        """Every checkpoint ID of the bound run in order, without loading payloads."""
        with Completion("list_checkpoint_ids") as done:
            self._check_workflow_name(workflow_name)
            ids: list[CheckpointID] = []
            after: tuple[int, str] | None = None
            while True:
                rows, more = await self._page_rows(after, self._options.page_size, _ORDER_FIELDS)
                ids.extend(row["checkpoint_id"] for row in rows)  # checked by _page_rows
                done.count = len(ids)
                if not more:
                    return ids
                after = stored_position(rows[-1])

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        """Delete one checkpoint of the bound run; False when it is not there."""
        with Completion("delete") as done:
            _check_id(checkpoint_id)
            with driver_errors(write=True):
                result = await self._collection.delete_one(
                    {**self._checkpoint_filter, "checkpoint_id": checkpoint_id}
                )
            done.count = result.deleted_count
            return bool(result.deleted_count == 1)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """The checkpoint with the greatest (sequence, checkpoint_id), or None for an empty run."""
        with Completion("get_latest") as done:
            self._check_workflow_name(workflow_name)
            with driver_errors(write=False):
                top = (
                    await self._collection.find(self._checkpoint_filter)
                    .sort("sequence", -1)
                    .limit(2)
                    .to_list()
                )
                if len(top) == 2 and stored_position(top[0])[0] == stored_position(top[1])[0]:
                    top = (
                        await self._collection.find(self._checkpoint_filter)
                        .sort([("sequence", -1), ("checkpoint_id", -1)])
                        .limit(1)
                        .to_list()
                    )
            if not top:
                return None
            done.count = 1
            return checkpoint_from_document(top[0], self._options, self._codec)

    # ------------------------------------------------------------- additions

    async def list_checkpoint_page(
        self, *, workflow_name: str, cursor: str | None = None, limit: int | None = None
    ) -> MongoDBCheckpointPage:
        """One bounded page of checkpoints in (sequence, checkpoint_id) order.

        ``limit`` defaults to ``options.page_size`` and may not exceed
        ``options.max_page_size``. Pass the returned ``next_cursor`` to continue;
        it is None after the last page. Foreign, malformed or unknown-version
        cursors raise ``MongoDBInvalidCursorError``.
        """
        with Completion("list_checkpoint_page") as done:
            self._check_workflow_name(workflow_name)
            size = self._page_size(limit)
            after = None if cursor is None else decode_cursor(cursor, self._scope_key)
            rows, more = await self._page_rows(after, size, _PAGE_FIELDS)
            with _collector_paused():
                checkpoints = [
                    checkpoint_from_document(r, self._options, self._codec) for r in rows
                ]
            done.count = len(checkpoints)
            next_cursor = None
            if more:
                next_cursor = encode_cursor(self._scope_key, *stored_position(rows[-1]))
            return MongoDBCheckpointPage(checkpoints, next_cursor)

    async def clear_run(self) -> MongoDBCheckpointClearResult:
        """Delete every checkpoint of the bound run, then its sequence counter.

        Best-effort and retry-safe, not a transaction: quiesce writers first,
        and call again after a partial failure.
        """
        with Completion("clear_run") as done:
            with driver_errors(write=True):
                checkpoints = await self._collection.delete_many(self._checkpoint_filter)
                counters = await self._collection.delete_one(self._counter_filter())
            done.count = checkpoints.deleted_count
            return MongoDBCheckpointClearResult(checkpoints.deleted_count, counters.deleted_count)

    async def ensure_indexes(self) -> None:
        """Create the required indexes (explicit provisioning; needs createIndex)."""
        with Completion("ensure_indexes") as done, driver_errors(write=True):
            for spec in INDEX_SPECS:
                await self._collection.create_index(list(spec.keys), **spec.create_kwargs())
            done.count = len(INDEX_SPECS)

    async def validate_indexes(self) -> list[str]:
        """Read-only check of the indexes; returns the problems found (empty when fine)."""
        with Completion("validate_indexes") as done:
            with driver_errors(write=False):
                existing = await self._collection.index_information()
            problems = index_problems(existing)
            done.count = len(problems)
            return problems

    # -------------------------------------------------------------- internals

    @property
    def _scope_key(self) -> str:
        return str(self._scope["scope_discriminator"])

    def _counter_filter(self) -> dict[str, Any]:
        return dict(self._counter)

    def _check_workflow_name(self, workflow_name: str) -> None:
        if workflow_name != self._options.workflow_name:
            raise MongoDBAuthorizationError(
                "workflow_name differs from the name this storage is bound to"
            )

    def _page_size(self, limit: int | None) -> int:
        if limit is None:
            return self._options.page_size
        if type(limit) is not int or not 1 <= limit <= self._options.max_page_size:
            raise MongoDBConfigurationError("limit must be an int between 1 and max_page_size")
        return limit

    async def _page_rows(
        self, after: tuple[int, str] | None, size: int, projection: dict[str, int] | None
    ) -> tuple[list[dict[str, Any]], bool]:
        """Up to ``size`` rows after ``after`` and whether more follow.

        Sequences are unique per scope, so the query sorts by ``sequence``
        alone, which the sequence index serves without an in-memory sort. The
        row at the cursor's own sequence is re-read on purpose: if another row
        shares a sequence (only possible without the unique index), the page is
        re-read with the exact (sequence, checkpoint_id) sort instead.
        """
        query = dict(self._checkpoint_filter)
        if after is not None:
            query["sequence"] = {"$gte": after[0]}
        with driver_errors(write=False):
            # batch_size: the whole page in the first reply (the server's default
            # first batch of 101 would cost a getMore round trip per page).
            rows = (
                await self._collection.find(query, projection)
                .sort("sequence", 1)
                .limit(size + 2)
                .batch_size(size + 2)
                .to_list()
            )
            sequences = [stored_position(row)[0] for row in rows]
            if len(set(sequences)) != len(sequences):
                rows = await self._exact_page(after, size, projection)
        if after is not None:
            rows = [r for r in rows if stored_position(r) > after]
        return rows[:size], len(rows) > size

    async def _exact_page(
        self, after: tuple[int, str] | None, size: int, projection: dict[str, int] | None
    ) -> list[dict[str, Any]]:
        query: dict[str, Any] = dict(self._checkpoint_filter)
        if after is not None:
            query["$or"] = [
                {"sequence": {"$gt": after[0]}},
                {"sequence": after[0], "checkpoint_id": {"$gt": after[1]}},
            ]
        order = [("sequence", 1), ("checkpoint_id", 1)]
        rows: list[dict[str, Any]] = (
            await self._collection.find(query, projection)
            .sort(order)
            .limit(size + 1)
            .batch_size(size + 1)
            .to_list()
        )
        return rows


def _check_id(checkpoint_id: object) -> None:
    if not isinstance(checkpoint_id, str) or not checkpoint_id or not storable_text(checkpoint_id):
        raise MongoDBConfigurationError(
            "checkpoint_id must be a non-empty string without lone surrogates"
        )
