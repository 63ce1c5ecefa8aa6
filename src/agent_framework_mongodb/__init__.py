"""MongoDB checkpoint storage for Microsoft Agent Framework workflows.

``MongoDBCheckpointStorage`` implements the framework's public
``CheckpointStorage`` protocol for one scoped run (tenant, optional
application, workflow name, session), with atomic per-run sequences,
bounded pagination, optional TTL, explicit index provisioning and a
restricted pickle codec. ``CheckpointCodec`` is that codec on its own, free of
MongoDB and of I/O, for other storages to share. See
``docs/agent_framework_mongodb.md``.
"""

from __future__ import annotations

from agent_framework_mongodb.codec import CheckpointCodec, EncodedPayload
from agent_framework_mongodb.errors import (
    MongoDBAuthorizationError,
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorageError,
    MongoDBConcurrencyError,
    MongoDBConfigurationError,
    MongoDBInvalidCursorError,
    MongoDBMappingError,
    MongoDBOperationError,
    MongoDBPersistenceError,
    MongoDBRetrievalError,
    MongoDBSequenceContentionError,
    MongoDBSerializationError,
    MongoDBStaleCheckpointError,
    MongoDBTransientPersistenceError,
    MongoDBTransientRetrievalError,
    MongoDBTypeNotPermittedError,
)
from agent_framework_mongodb.options import MongoDBCheckpointStorageOptions
from agent_framework_mongodb.paging import MongoDBCheckpointClearResult, MongoDBCheckpointPage
from agent_framework_mongodb.storage import MongoDBCheckpointStorage

__all__ = [
    "CheckpointCodec",
    "EncodedPayload",
    "MongoDBAuthorizationError",
    "MongoDBCheckpointClearResult",
    "MongoDBCheckpointNotFoundError",
    "MongoDBCheckpointPage",
    "MongoDBCheckpointStorage",
    "MongoDBCheckpointStorageError",
    "MongoDBCheckpointStorageOptions",
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
