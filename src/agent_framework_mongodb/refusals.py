"""Refused saves, made visible: Agent Framework itself only logs a warning.

When a checkpoint save fails inside a workflow run, the framework's runner
logs a warning and carries on, so a run can report "paused, with pending
requests" while the latest stored checkpoint predates the pause, and a resume
from ``get_latest`` silently restarts without them. Every refused save is
therefore

- logged at ERROR on the ``agent_framework_mongodb`` logger, with its stable
  category only (the log rules of :mod:`~agent_framework_mongodb.telemetry`);
- counted per category in :data:`REFUSED_SAVES` (process-wide);
- recorded in the run itself: one refusal document per scope
  (``_kind: workflow_checkpoint_refusal``) holding the refused checkpoint ID,
  the category and the greatest sequence stored when it was refused.
  ``get_latest`` reads it and raises
  :class:`~agent_framework_mongodb.MongoDBStaleCheckpointError` while the
  latest stored checkpoint is not newer, in any process; the next successful
  save (a greater sequence) ends that on its own.

A save refused because it names another workflow records nothing in this
run (the run is not stale; ``get_latest`` for that name is refused anyway),
and a refusal that cannot be recorded (MongoDB unreachable) is logged too.
"""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

from agent_framework import WorkflowCheckpoint

from agent_framework_mongodb.documents import stored_sequence
from agent_framework_mongodb.errors import (
    MongoDBAuthorizationError,
    MongoDBCheckpointStorageError,
    MongoDBMappingError,
)
from agent_framework_mongodb.indexes import SIMPLE_COLLATION
from agent_framework_mongodb.options import storable_text
from agent_framework_mongodb.telemetry import FEATURE, driver_errors, logger

__all__ = ["REFUSAL_KIND", "REFUSED_SAVES", "Refusal", "RefusalRecorder"]

REFUSAL_KIND: Final = "workflow_checkpoint_refusal"
#: Refused saves of this process, per stable category.
REFUSED_SAVES: Counter[str] = Counter()


@dataclass(frozen=True, slots=True)
class Refusal:
    """The last refused save of a run, as its refusal document records it."""

    checkpoint_id: str | None
    category: str
    after_sequence: int

    def makes_stale(self, top: dict[str, Any] | None) -> bool:
        """Whether ``top`` (the run's latest stored document) predates this refusal."""
        if top is None:
            return True
        if self.checkpoint_id is not None and top.get("checkpoint_id") == self.checkpoint_id:
            return False  # the refused write landed after all (its outcome was unknown)
        return stored_sequence(top) <= self.after_sequence


class RefusalRecorder:
    """Records and reads the refusal document of one scoped run."""

    def __init__(
        self, collection: Any, marker: dict[str, Any], checkpoint_filter: dict[str, Any]
    ) -> None:
        self._collection = collection
        self._marker = marker  # _id, _kind and the scope fields
        self._checkpoint_filter = checkpoint_filter

    async def record(self, checkpoint: object, error: MongoDBCheckpointStorageError) -> None:
        """Log, count and (for this run's checkpoints) record a refused save."""
        REFUSED_SAVES[error.category] += 1
        logger.error(
            "feature=%s operation=save outcome=refused category=%s: the workflow runs on "
            "without this checkpoint; get_latest raises MongoDBStaleCheckpointError until a "
            "later save succeeds",
            FEATURE,
            error.category,
        )
        if isinstance(error, MongoDBAuthorizationError) or not isinstance(
            checkpoint, WorkflowCheckpoint
        ):
            return
        try:
            with driver_errors(write=True):
                top = await self._collection.find_one(
                    self._checkpoint_filter,
                    {"_id": 0, "sequence": 1},
                    sort=[("sequence", -1)],
                    collation=SIMPLE_COLLATION,
                )
                refused_id = checkpoint.checkpoint_id
                document = {
                    **self._marker,
                    # An ID MongoDB cannot store (the refusal may be about it) is not kept.
                    "checkpoint_id": refused_id if _storable_id(refused_id) else None,
                    "category": error.category,
                    "after_sequence": 0 if top is None else stored_sequence(top),
                    "created_at": datetime.datetime.now(datetime.UTC),
                }
                await self._collection.replace_one(
                    self._marker, document, upsert=True, collation=SIMPLE_COLLATION
                )
        except MongoDBCheckpointStorageError as failure:
            logger.error(
                "feature=%s operation=save outcome=refusal_not_recorded category=%s",
                FEATURE,
                failure.category,
            )

    async def last(self) -> Refusal | None:
        """The run's recorded refusal, if any."""
        with driver_errors(write=False):
            found = await self._collection.find_one(self._marker, collation=SIMPLE_COLLATION)
        if found is None:
            return None
        checkpoint_id, category = found.get("checkpoint_id"), found.get("category")
        after = found.get("after_sequence")
        if (
            not (checkpoint_id is None or isinstance(checkpoint_id, str))
            or not isinstance(category, str)
            or type(after) is not int
            or after < 0
        ):
            raise MongoDBMappingError("the run's refusal document is damaged")
        return Refusal(checkpoint_id, category, after)

    async def clear(self) -> None:
        with driver_errors(write=True):
            await self._collection.delete_one(self._marker, collation=SIMPLE_COLLATION)


def _storable_id(value: object) -> bool:
    return isinstance(value, str) and storable_text(value)
