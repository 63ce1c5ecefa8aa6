"""``AgentflowCheckpointStorage``: Agent Framework's ``CheckpointStorage`` over any Checkpointer.

Costs, in protocol calls (each one round trip):

- ``save``: a conditional ``put`` of the id's index entry, then a conditional
  ``put`` of the checkpoint at the next step; the first save of a workflow in
  a process adds a ``get`` of the latest step. A step another writer took
  costs a ``get``, a re-point of the index entry and another ``put``.
- ``load``: two ``get`` calls (index entry, checkpoint); one for an id this
  storage saved or loaded recently.
- ``get_latest``: one ``get``; one more per deleted checkpoint (or refused
  save) on top, and a newest-first ``history`` down to the live one when
  their pointers lead nowhere.
- ``list_checkpoints`` / ``list_checkpoint_ids``: one ``history`` of the
  workflow's thread, read in the backend's bounded batches.
- ``delete``: the ``load`` lookup, a ``get`` of the step below, a conditional
  ``put`` of the ``deleted`` record and one of the index entry.
- a refused ``save``: two ``get`` calls and a conditional ``put`` of the
  ``refused`` record (:mod:`~agentflow.integrations.agent_framework.refusals`).

Every failure of a read is a ``WorkflowCheckpointException``
(:mod:`~agentflow.integrations.agent_framework.errors`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager
from typing import Final, NamedTuple

from agent_framework import CheckpointID, CheckpointStorage, WorkflowCheckpoint
from agent_framework.exceptions import WorkflowCheckpointException

from agentflow.checkpoint.base import Checkpoint, Checkpointer, with_defaults
from agentflow.errors import (
    AgentflowError,
    CheckpointConflict,
    CheckpointCorrupted,
    InvalidArgument,
)
from agentflow.integrations.agent_framework.errors import (
    CheckpointIdConflict,
    CheckpointLoadFailed,
    CheckpointNotFound,
    CheckpointStale,
    InvalidCheckpointArgument,
)
from agentflow.integrations.agent_framework.index import IdIndex
from agentflow.integrations.agent_framework.payload import Encoded, PayloadCodec
from agentflow.integrations.agent_framework.records import (
    POINTERS,
    SEPARATOR,
    Place,
    Stored,
    check_checkpoint_id,
    check_label,
    record,
    run_thread,
    stored_record,
)
from agentflow.integrations.agent_framework.refusals import log_refusal, logger, refused_record
from agentflow.integrations.agent_framework.view import checkpoint_view

__all__ = ["AgentflowCheckpointStorage"]

#: Ids whose place this storage remembers, and threads whose next step.
_REMEMBERED: Final = 4096
#: Puts lost to other writers before a save or delete gives up (CheckpointConflict).
_ATTEMPTS: Final = 100


class _Save(NamedTuple):
    """A checkpoint as it will be stored, encoded before ``save``'s first await."""

    thread: str
    checkpoint_id: str
    encoded: Encoded
    view: dict[str, object]

    def at(self, step: int) -> Checkpoint:
        fields = {"id": self.checkpoint_id, "hash": self.encoded.payload_hash}
        fields["payload"] = self.encoded.payload
        return record(self.thread, step, "checkpoint", fields, **self.view)


@contextmanager
def _read_errors() -> Iterator[None]:
    """A store's error during a read, as the ``WorkflowCheckpointException`` AF expects."""
    try:
        yield
    except AgentflowError as exc:
        if isinstance(exc, WorkflowCheckpointException):
            raise
        if isinstance(exc, InvalidArgument):
            raise InvalidCheckpointArgument(str(exc)) from exc
        raise CheckpointLoadFailed(exc) from exc


def _remember(cache: dict[str, Place] | dict[str, int], key: str, value: object) -> None:
    cache.pop(key, None)
    if len(cache) >= _REMEMBERED:
        del cache[next(iter(cache))]
    cache[key] = value  # type: ignore[assignment]


class AgentflowCheckpointStorage(CheckpointStorage):
    """Stores Agent Framework workflow checkpoints in an agentflow ``Checkpointer``.

    Tenancy is the checkpointer's ``namespace``: bind one per tenant.
    ``session`` (optional) keeps one run's checkpoints apart from other runs
    of the same workflow: each (workflow, session) is its own agentflow
    thread, and a storage reads only its own session's checkpoints, by id
    too. Checkpoints are encoded by ``agent_framework_mongodb``'s restricted,
    verified codec; ``allowed_checkpoint_types`` (``"module:qualname"``)
    permits your own classes in checkpoint state, exactly as for
    ``MongoDBCheckpointStorage``. The storage does not own ``checkpointer``:
    close it yourself. See docs/agent_framework.md.
    """

    def __init__(
        self,
        checkpointer: Checkpointer,
        *,
        session: str | None = None,
        allowed_checkpoint_types: Iterable[str] = (),
    ) -> None:
        self.checkpointer = with_defaults(checkpointer)
        self.session = None if session is None else check_label(session, "session")
        self._payloads = PayloadCodec(allowed_checkpoint_types)
        self._index = IdIndex(self.checkpointer)
        self._places: dict[str, Place] = {}
        self._next_steps: dict[str, int] = {}

    def thread_of(self, workflow_name: str) -> str:
        """The agentflow thread holding ``workflow_name``'s checkpoints (for the CLI)."""
        return run_thread(workflow_name, self.session)

    # -- the protocol ----------------------------------------------------------

    async def save(self, checkpoint: WorkflowCheckpoint) -> CheckpointID:
        """Store ``checkpoint`` as the next step of its workflow; return its id.

        It is encoded before the first await, so later changes by the caller
        never reach the store. Saving the same checkpoint again returns its
        id and stores nothing; other content under a stored id raises
        :class:`CheckpointIdConflict`. A refused save is logged at ERROR,
        counted and recorded, so ``get_latest`` raises :class:`CheckpointStale`
        until a later save succeeds (Agent Framework only warns and runs on).
        """
        try:
            return await self._save(checkpoint)
        except AgentflowError as exc:
            await self._refused(checkpoint, exc)
            raise

    async def _save(self, checkpoint: WorkflowCheckpoint) -> CheckpointID:
        save = self._prepare(checkpoint)
        thread, cid = save.thread, save.checkpoint_id
        step = self._next_steps.get(thread)
        place = Place(thread, await self._top(thread) + 1 if step is None else step)
        held = await self._index.claim(cid, place)
        attempts = 0
        while True:
            if held is not None:  # the id has an entry: a re-save, or a save cut short
                stored = await self._holding(held, cid)
                if stored is not None:
                    return self._saved_again(save, held, stored)
                place = Place(thread, await self._free_step(thread, held))
                held = await self._index.move(cid, held, place)
                if held is not None:
                    continue
            try:
                await self.checkpointer.put(save.at(place.step), if_revision=0)
            except CheckpointConflict:
                attempts += 1
                if attempts == _ATTEMPTS:
                    raise
                held = place  # the step is taken: by this checkpoint, or by another
                continue
            _remember(self._places, cid, place)
            _remember(self._next_steps, thread, place.step + 1)
            return cid

    async def load(self, checkpoint_id: CheckpointID) -> WorkflowCheckpoint:
        """A fresh copy of the checkpoint; :class:`CheckpointNotFound` when it is absent."""
        with _read_errors():
            found = await self._locate(check_checkpoint_id(checkpoint_id))
            if found is None:
                raise CheckpointNotFound(checkpoint_id)
            return self._payloads.decode(found[1])

    async def list_checkpoints(self, *, workflow_name: str) -> list[WorkflowCheckpoint]:
        """The workflow's checkpoints in the order they were saved."""
        with _read_errors():
            return [
                self._payloads.decode(stored)
                async for stored in self._records(self.thread_of(workflow_name))
                if stored.kind == "checkpoint"
            ]

    async def list_checkpoint_ids(self, *, workflow_name: str) -> list[CheckpointID]:
        """The workflow's checkpoint ids in the order they were saved, decoding none."""
        with _read_errors():
            return [
                stored.checkpoint_id
                async for stored in self._records(self.thread_of(workflow_name))
                if stored.kind == "checkpoint"
            ]

    async def delete(self, checkpoint_id: CheckpointID) -> bool:
        """Delete one checkpoint; False when it is not there (or another delete won)."""
        cid = check_checkpoint_id(checkpoint_id)
        attempts = 0
        while True:
            found = await self._locate(cid)
            if found is None:
                return False
            place, stored = found
            fields = {"id": cid, "live": await self._live_below(place)}
            tombstone = record(
                place.thread, place.step, "deleted", fields, state={"deleted_checkpoint_id": cid}
            )
            try:
                await self.checkpointer.put(tombstone, if_revision=stored.revision)
            except CheckpointConflict:
                attempts += 1
                if attempts == _ATTEMPTS:
                    raise
                continue
            self._places.pop(cid, None)
            await self._index.remove(cid, place)
            return True

    async def get_latest(self, *, workflow_name: str) -> WorkflowCheckpoint | None:
        """The checkpoint saved last, or None when the workflow has none.

        Raises :class:`CheckpointStale` (holding that checkpoint as ``latest``)
        when the workflow's last save was refused after it was stored.
        """
        with _read_errors():
            thread = self.thread_of(workflow_name)
            top = await self._read(thread, None)
            stored = top
            while stored is not None and stored.kind in POINTERS:
                live = stored.fields["live"]
                below = None if live is None else await self._read(thread, live)
                stored = await self._last_live(thread) if below is None else below
            latest = None if stored is None else self._payloads.decode(stored)
            if top is not None and top.kind == "refused":
                refused_id = top.fields["id"]
                if stored is None or not stored.holds(refused_id):  # else it landed after all
                    raise CheckpointStale(workflow_name, refused_id, top.fields["code"], latest)
            return latest

    # -- reading ---------------------------------------------------------------

    def _ours(self, cp: Checkpoint) -> Stored:
        stored = stored_record(cp)
        if stored is None or stored.kind == "index":
            raise CheckpointCorrupted(
                f"thread {cp.thread!r} step {cp.step} is not an Agent Framework checkpoint: "
                "another framework or the runtime uses this thread id"
            )
        return stored

    async def _read(self, thread: str, step: int | None) -> Stored | None:
        cp = await self.checkpointer.get(thread, step)
        return None if cp is None else self._ours(cp)

    async def _records(self, thread: str) -> AsyncIterator[Stored]:
        async for cp in self.checkpointer.history(thread):
            yield self._ours(cp)

    async def _top(self, thread: str) -> int:
        """The thread's latest step, -1 when it has none."""
        stored = await self._read(thread, None)
        return -1 if stored is None else stored.step

    async def _holding(self, place: Place, checkpoint_id: str) -> Stored | None:
        """The record at ``place`` when it is the live checkpoint ``checkpoint_id``."""
        cp = await self.checkpointer.get(place.thread, place.step)
        stored = None if cp is None else stored_record(cp)
        return stored if stored is not None and stored.holds(checkpoint_id) else None

    def _mine(self, place: Place) -> bool:
        _, sep, session = place.thread.partition(SEPARATOR)
        return (session if sep else None) == self.session

    async def _locate(self, checkpoint_id: str) -> tuple[Place, Stored] | None:
        place = self._places.get(checkpoint_id)
        if place is not None:
            stored = await self._holding(place, checkpoint_id)
            if stored is not None:
                return place, stored
            self._places.pop(checkpoint_id, None)
        place = await self._index.find(checkpoint_id)
        if place is None or not self._mine(place):
            return None
        stored = await self._holding(place, checkpoint_id)
        if stored is None:
            return None
        _remember(self._places, checkpoint_id, place)
        return place, stored

    async def _live_below(self, place: Place) -> int | None:
        """The step of the nearest live checkpoint below ``place``, as far as
        one read tells (None: nothing there, or only deleted ones pointing nowhere)."""
        below = None if place.step == 0 else await self._read(place.thread, place.step - 1)
        if below is None:
            return None
        live: int | None = below.step if below.kind == "checkpoint" else below.fields["live"]
        return live

    async def _last_live(self, thread: str) -> Stored | None:
        """The last live checkpoint of ``thread``, reading it newest first down to
        that one (only when deleted records on top lead nowhere)."""
        newest = self.checkpointer.history(thread, newest_first=True)
        try:
            async for cp in newest:
                stored = self._ours(cp)
                if stored.kind == "checkpoint":
                    return stored
        finally:
            close = getattr(newest, "aclose", None)
            if close is not None:
                await close()
        return None

    # -- writing ---------------------------------------------------------------

    async def _refused(self, checkpoint: object, error: AgentflowError) -> None:
        """Log, count and record one refused save (see :mod:`.refusals`)."""
        name = getattr(checkpoint, "workflow_name", None)
        cid = getattr(checkpoint, "checkpoint_id", None)
        log_refusal(error.code, name, cid, str(error))
        if not isinstance(checkpoint, WorkflowCheckpoint) or isinstance(error, InvalidArgument):
            return  # nothing to place it under
        try:
            thread, cid = self.thread_of(checkpoint.workflow_name), check_checkpoint_id(cid)
            for _ in range(_ATTEMPTS):
                top = await self._top(thread)
                live = await self._live_below(Place(thread, top + 1))
                try:
                    refused = refused_record(thread, top + 1, cid, error.code, live)
                    await self.checkpointer.put(refused, if_revision=0)
                except CheckpointConflict:
                    continue  # another writer took the step: record above it
                _remember(self._next_steps, thread, top + 2)
                return
        except AgentflowError as failure:
            logger.error("the refused save could not be recorded (%s): %s", failure.code, failure)

    def _prepare(self, checkpoint: WorkflowCheckpoint) -> _Save:
        if not isinstance(checkpoint, WorkflowCheckpoint):
            raise InvalidArgument(
                f"save takes an agent_framework.WorkflowCheckpoint, got {type(checkpoint).__name__}"
            )
        thread = self.thread_of(checkpoint.workflow_name)
        cid = check_checkpoint_id(checkpoint.checkpoint_id)
        if checkpoint.previous_checkpoint_id is not None:
            check_checkpoint_id(checkpoint.previous_checkpoint_id)
        encoded = self._payloads.encode(checkpoint)
        return _Save(thread, cid, encoded, checkpoint_view(checkpoint))

    async def _free_step(self, thread: str, held: Place) -> int:
        """Where a checkpoint whose entry names ``held`` (not holding it) goes:
        that step if it is still above the thread's top, else the next one."""
        top = await self._top(thread)
        return held.step if held.thread == thread and held.step > top else top + 1

    def _saved_again(self, save: _Save, place: Place, stored: Stored) -> str:
        if place.thread != save.thread or stored.fields["hash"] != save.encoded.payload_hash:
            raise CheckpointIdConflict(
                f"checkpoint id {save.checkpoint_id!r} is stored already, with other content "
                "or by another workflow or session"
            )
        _remember(self._places, save.checkpoint_id, place)
        return save.checkpoint_id
