"""The stable error categories of the MongoDB checkpoint storage.

Callers branch on the class or on ``category`` (and agentflow's ``code``),
never on message text. Messages never carry IDs, scope values, payloads or
driver text, because workflow engines log exceptions freely; the driver's
exception, when there is one, is kept as ``__cause__`` for the operator who
needs it. ``retryable`` marks the transient categories, where repeating the
same call may succeed.
"""

from __future__ import annotations

from agent_framework.exceptions import WorkflowCheckpointException

from agentflow.errors import AgentflowError

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
    "MongoDBTransientPersistenceError",
    "MongoDBTransientRetrievalError",
]


class MongoDBCheckpointStorageError(AgentflowError):
    """Base of every error the MongoDB checkpoint storage raises."""

    code = "mongodb_checkpoint_error"
    category = "mongodb"


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


class MongoDBCheckpointNotFoundError(MongoDBRetrievalError, WorkflowCheckpointException):
    """No checkpoint with that ID exists in the bound scope.

    It is also the framework's ``WorkflowCheckpointException`` so that the
    workflow runner treats it like a missing checkpoint of any other storage.
    """

    code = "mongodb_checkpoint_not_found"
    category = "not_found"

    def __init__(self, message: str) -> None:
        # The framework's base class logs every message it is built with; the
        # storage keeps its own log discipline, so that log is switched off.
        super().__init__(message, None, None)


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
