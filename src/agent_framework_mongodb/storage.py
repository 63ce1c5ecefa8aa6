"""``MongoDBCheckpointStorage``: Agent Framework checkpoints in one scoped MongoDB run.

The framework's protocol passes only a checkpoint or an ID, so the storage is
bound to one (tenant, application, workflow, session) scope and every query
carries that scope in full; an ID alone never selects a document. Order is
the per-scope ``sequence`` allocated atomically at save time, never the
timestamp or the iteration count (several checkpoints share an iteration).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from agent_framework import CheckpointID, CheckpointStorage, WorkflowCheckpoint
from pymongo import AsyncMongoClient

from agent_framework_mongodb.codec import CheckpointCodec
from agent_framework_mongodb.documents import (
    check_document_size,
    checkpoint_from_document,
    encode_checkpoint,
    stored_position,
)
from agent_framework_mongodb.errors import (
    MongoDBAuthorizationError,
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorageError,
    MongoDBConfigurationError,
    MongoDBStaleCheckpointError,
)
from agent_framework_mongodb.indexes import (
    CHECKPOINT_KIND,
    COUNTER_KIND,
    INDEX_SPECS,
    SIMPLE_COLLATION,
    collection_problems,
    index_problems,
)
from agent_framework_mongodb.options import MongoDBCheckpointStorageOptions, storable_text
from agent_framework_mongodb.paging import (
    CursorSigner,
    MongoDBCheckpointClearResult,
    MongoDBCheckpointPage,
    cursor_secret,
    decode_cursor,
    split_cursor,
)
from agent_framework_mongodb.refusals import REFUSAL_KIND, RefusalRecorder
from agent_framework_mongodb.rows import PageRows, collector_paused
from agent_framework_mongodb.telemetry import Completion, driver_errors
from agent_framework_mongodb.writes import CheckpointWriter

__all__ = ["MongoDBCheckpointStorage"]

_ORDER_FIELDS = {"_id": 0, "sequence": 1, "checkpoint_id": 1}
# Fields a page never reads (decoding checks the gates, the scope and the payload).
_PAGE_FIELDS = {"_id": 0, "payload_hash": 0, "created_at": 0, "expires_at": 0}


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
        refusal = {"_id": options.refusal_id(), "_kind": REFUSAL_KIND, **self._scope}
        self._refusals = RefusalRecorder(collection, refusal, self._checkpoint_filter)
        self._signer: CursorSigner | None = None
        self._rows = PageRows(collection, self._checkpoint_filter)

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

        A refused save is logged at ERROR, counted and recorded in the run
        (:mod:`~agent_framework_mongodb.refusals`): Agent Framework only warns
        and runs on, and ``get_latest`` then raises
        ``MongoDBStaleCheckpointError`` instead of returning the older
        checkpoint, until a later save succeeds.
        """
        with Completion("save") as done:
            try:
                encoded = encode_checkpoint(checkpoint, self._options, self._codec)
                check_document_size(checkpoint, encoded, self._options)
                await self._writer.write(checkpoint, encoded)
            except MongoDBCheckpointStorageError as exc:
                await self._refusals.record(checkpoint, exc)
                raise
            done.count = 1
            return checkpoint.checkpoint_id

    async def load(self, checkpoint_id: CheckpointID) -> WorkflowCheckpoint:
        """A fresh copy of the checkpoint; ``MongoDBCheckpointNotFoundError`` if it is absent."""
        with Completion("load") as done:
            _check_id(checkpoint_id)
            with driver_errors(write=False):
                document = await self._collection.find_one(
                    {**self._checkpoint_filter, "checkpoint_id": checkpoint_id},
                    collation=SIMPLE_COLLATION,
                )
            if document is None:
                raise MongoDBCheckpointNotFoundError(checkpoint_id)
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
                rows, more = await self._rows.page(after, self._options.page_size, _ORDER_FIELDS)
                ids.extend(row["checkpoint_id"] for row in rows)  # checked by page()
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
                    {**self._checkpoint_filter, "checkpoint_id": checkpoint_id},
                    collation=SIMPLE_COLLATION,
                )
            done.count = result.deleted_count
            return bool(result.deleted_count == 1)

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """The checkpoint with the greatest (sequence, checkpoint_id), or None for an empty run.

        Raises ``MongoDBStaleCheckpointError`` (holding that checkpoint as
        ``latest``) when the run's last save was refused after it was stored.
        """
        with Completion("get_latest") as done:
            self._check_workflow_name(workflow_name)
            with driver_errors(write=False):
                top = (
                    await self._collection.find(self._checkpoint_filter)
                    .collation(SIMPLE_COLLATION)
                    .sort("sequence", -1)
                    .limit(2)
                    .to_list()
                )
                if len(top) == 2 and stored_position(top[0])[0] == stored_position(top[1])[0]:
                    top = (
                        await self._collection.find(self._checkpoint_filter)
                        .collation(SIMPLE_COLLATION)
                        .sort([("sequence", -1), ("checkpoint_id", -1)])
                        .limit(1)
                        .to_list()
                    )
            refusal = await self._refusals.last()
            latest = checkpoint_from_document(top[0], self._options, self._codec) if top else None
            if refusal is not None and refusal.makes_stale(top[0] if top else None):
                raise MongoDBStaleCheckpointError(refusal.category, latest)
            done.count = 0 if latest is None else 1
            return latest

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
            after = None if cursor is None else await self._position(cursor)
            rows, more = await self._rows.page(after, size, _PAGE_FIELDS)
            with collector_paused():
                checkpoints = [
                    checkpoint_from_document(r, self._options, self._codec) for r in rows
                ]
            done.count = len(checkpoints)
            next_cursor = None
            if more:
                signer = await self._cursor_signer()
                next_cursor = signer.encode(*stored_position(rows[-1]))
            return MongoDBCheckpointPage(checkpoints, next_cursor)

    async def clear_run(self) -> MongoDBCheckpointClearResult:
        """Delete every checkpoint of the bound run, then its sequence counter.

        Best-effort and retry-safe, not a transaction: quiesce writers first,
        and call again after a partial failure.
        """
        with Completion("clear_run") as done:
            with driver_errors(write=True):
                checkpoints = await self._collection.delete_many(
                    self._checkpoint_filter, collation=SIMPLE_COLLATION
                )
                counters = await self._collection.delete_one(
                    self._counter_filter(), collation=SIMPLE_COLLATION
                )
            await self._refusals.clear()
            done.count = checkpoints.deleted_count
            return MongoDBCheckpointClearResult(checkpoints.deleted_count, counters.deleted_count)

    async def ensure_indexes(self) -> None:
        """Create the required indexes (explicit provisioning; needs createIndex)."""
        with Completion("ensure_indexes") as done, driver_errors(write=True):
            for spec in INDEX_SPECS:
                await self._collection.create_index(list(spec.keys), **spec.create_kwargs())
            done.count = len(INDEX_SPECS)

    async def validate_indexes(self) -> list[str]:
        """Read-only check of the indexes and of the collection's default
        collation; returns the problems found (empty when fine)."""
        with Completion("validate_indexes") as done:
            with driver_errors(write=False):
                existing = await self._collection.index_information()
                options = await self._collection.options()
            problems = collection_problems(options) + index_problems(existing)
            done.count = len(problems)
            return problems

    # -------------------------------------------------------------- internals

    async def _position(self, cursor: str) -> tuple[int, str]:
        """Where a cursor points: its body checked before any I/O, then its MAC."""
        body, mac = split_cursor(cursor)
        position = decode_cursor(body, str(self._scope["scope_discriminator"]))
        (await self._cursor_signer()).verify(body, mac)
        return position

    async def _cursor_signer(self) -> CursorSigner:
        if self._signer is None:
            secret = await cursor_secret(self._collection)
            self._signer = CursorSigner(secret, str(self._scope["scope_discriminator"]))
        return self._signer

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


def _check_id(checkpoint_id: object) -> None:
    if not isinstance(checkpoint_id, str) or not checkpoint_id or not storable_text(checkpoint_id):
        raise MongoDBConfigurationError(
            "checkpoint_id must be a non-empty string without lone surrogates"
        )
