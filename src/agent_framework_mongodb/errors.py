"""The stable error categories of the MongoDB checkpoint storage.

Callers branch on the class or on ``category`` (and agentflow's ``code``),
never on message text. Messages never carry scope values, payloads or driver
text, because workflow engines log exceptions freely, and carry no IDs except
the missing checkpoint's, in Agent Framework's own wording (the framework
names that ID in its own errors and logs too); the driver's exception, when
there is one, is kept as ``__cause__`` for the operator who needs it.
``retryable`` marks the transient categories, where repeating the same call
may succeed.

Every class is also Agent Framework's ``WorkflowCheckpointException``, so a
workflow runner, or a caller that handles a built-in storage's checkpoint
errors, handles these the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_framework.exceptions import WorkflowCheckpointException

from agentflow.errors import AgentflowError

if TYPE_CHECKING:
    from agent_framework import WorkflowCheckpoint

__all__ = [
    "MongoDBAuthorizationError",
    "MongoDBCheckpointNotFoundError",
    "MongoDBCheckpointStorageError",
    "MongoDBConcurrencyError",
    "MongoDBConfigurationError",
    "MongoDBInvalidCursorError",
    "MongoDBMappingError",
    "MongoDBOperationError",
    "MongoDBPersistenceError",
    "MongoDBRetrievalError",
    "MongoDBSequenceContentionError",
    "MongoDBSerializationError",
    "MongoDBStaleCheckpointError",
    "MongoDBTransientPersistenceError",
    "MongoDBTransientRetrievalError",
    "MongoDBTypeNotPermittedError",
]


class MongoDBCheckpointStorageError(AgentflowError, WorkflowCheckpointException):
    """Base of every error the MongoDB checkpoint storage raises."""

    code = "mongodb_checkpoint_error"
    category = "mongodb"

    def __init__(self, message: str) -> None:
        # The framework's base class logs every message it is built with (at
        # debug); the storage keeps its own log discipline, so that log is off.
        super().__init__(message, None, None)


class MongoDBConfigurationError(MongoDBCheckpointStorageError, ValueError):
    """Options, constructor arguments or call arguments are invalid; nothing was done."""

    code = "mongodb_checkpoint_configuration"
    category = "configuration"


class MongoDBInvalidCursorError(MongoDBConfigurationError):
    """A page cursor is malformed, of an unknown version, or from another scope."""

    code = "mongodb_checkpoint_invalid_cursor"
    category = "invalid_cursor"


class MongoDBAuthorizationError(MongoDBCheckpointStorageError):
    """A call or a checkpoint names a scope other than the bound one, or MongoDB refused access."""

    code = "mongodb_checkpoint_authorization"
    category = "authorization"


class MongoDBMappingError(MongoDBCheckpointStorageError):
    """A checkpoint cannot be mapped to or from its stored document.

    Raised for unsupported values, cycles, non-finite floats, and stored
    documents whose compatibility gates (schema, framework, payload or hash
    version) this release does not understand.
    """

    code = "mongodb_checkpoint_mapping"
    category = "mapping"


class MongoDBSerializationError(MongoDBMappingError, TypeError):
    """The lossless pickle encoding would not be canonical or safe.

    Custom pickle hooks, copyreg extension codes, mapping subclasses, a
    restricted-load failure, or a round trip that changes the canonical graph.
    """

    code = "mongodb_checkpoint_serialization"
    category = "serialization"


class MongoDBTypeNotPermittedError(MongoDBSerializationError):
    """A checkpoint names a class this storage does not permit, at save or at load.

    Not listed in ``allowed_checkpoint_types``, or listed but refused because
    building, hashing or saving it would run its own code (pickle hooks,
    attribute hooks, a custom metaclass). Nothing of the class ran. At load
    this is a refusal, not damage: list the class, or migrate the value.
    ``type_key`` is the class's ``module:qualname``; at load the message starts
    with Agent Framework's own words for it ("Checkpoint deserialization
    blocked for type ...").
    """

    code = "mongodb_checkpoint_type_not_permitted"
    category = "type_not_permitted"

    def __init__(self, message: str, type_key: str) -> None:
        super().__init__(message)
        self.type_key = type_key


class MongoDBConcurrencyError(MongoDBCheckpointStorageError):
    """A checkpoint ID was reused with different public state: a real conflict."""

    code = "mongodb_checkpoint_concurrency"
    category = "concurrency"


class MongoDBSequenceContentionError(MongoDBCheckpointStorageError):
    """Concurrent saves kept colliding on newly allocated sequences; nothing was stored.

    Only possible while a run's counter is being recovered (after TTL or a
    deletion removed it) under several concurrent writers, and only after
    ``save`` already retried the allocation. Deliberately not a
    ``MongoDBConcurrencyError``: the checkpoint conflicts with nothing, and
    the same ``save`` may simply be repeated.
    """

    code = "mongodb_checkpoint_sequence_contention"
    category = "sequence_contention"
    retryable = True


class MongoDBRetrievalError(MongoDBCheckpointStorageError):
    """A read failed for a reason that retrying alone will not fix."""

    code = "mongodb_checkpoint_retrieval"
    category = "retrieval"


class MongoDBCheckpointNotFoundError(MongoDBRetrievalError):
    """No checkpoint with that ID exists in the bound scope.

    The message is Agent Framework's own ("No checkpoint found with ID ..."),
    so the runner and callers matching on it treat it like a missing
    checkpoint of a built-in storage; ``checkpoint_id`` holds the ID.
    """

    code = "mongodb_checkpoint_not_found"
    category = "not_found"

    def __init__(self, checkpoint_id: str) -> None:
        super().__init__(f"No checkpoint found with ID {checkpoint_id}")
        self.checkpoint_id = checkpoint_id


class MongoDBStaleCheckpointError(MongoDBRetrievalError):
    """The run's last save was refused, so its latest stored checkpoint is stale.

    Agent Framework only logs a warning when a save fails and runs on, so a
    paused run's latest stored checkpoint can predate the pause; resuming
    from it would restart without the pending requests. ``get_latest`` raises
    this instead of returning that checkpoint until a later save succeeds.
    ``refused_category`` is the refusal's stable category; ``latest`` is the
    stale checkpoint (or None), for a caller who chooses to resume from it.
    """

    code = "mongodb_checkpoint_stale"
    category = "stale_checkpoint"

    def __init__(self, refused_category: str, latest: WorkflowCheckpoint | None) -> None:
        super().__init__(
            f"the latest save of this run was refused ({refused_category}); the latest stored "
            "checkpoint predates it. Fix the refusal and save again, or resume from .latest "
            "deliberately"
        )
        self.refused_category = refused_category
        self.latest = latest


class MongoDBTransientRetrievalError(MongoDBRetrievalError):
    """A read failed on a dropped connection or timeout; the same call may succeed."""

    code = "mongodb_checkpoint_transient_retrieval"
    category = "transient_retrieval"
    retryable = True


class MongoDBPersistenceError(MongoDBCheckpointStorageError):
    """A write failed for a reason that retrying alone will not fix."""

    code = "mongodb_checkpoint_persistence"
    category = "persistence"


class MongoDBTransientPersistenceError(MongoDBPersistenceError):
    """A write failed on a dropped connection or timeout.

    Whether it landed is unknown; retrying ``save`` with the same checkpoint
    is safe because an identical retry returns the same ID.
    """

    code = "mongodb_checkpoint_transient_persistence"
    category = "transient_persistence"
    retryable = True


class MongoDBOperationError(MongoDBCheckpointStorageError):
    """Any other MongoDB failure (server error, index problem)."""

    code = "mongodb_checkpoint_operation"
    category = "mongodb"
