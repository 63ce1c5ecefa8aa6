"""Driver-error translation and the one completion log line per operation.

Checkpoint state routinely holds secrets (a run's ``function_invocation_kwargs``
and ``client_kwargs`` land in it), and scope values identify customers, so a
completion log carries only: feature, operation, outcome, result count,
duration and stable error category. Never IDs, scopes, payloads,
database/collection names, filters, driver messages, hosts or credentials.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from pymongo.errors import (
    ConnectionFailure,
    DocumentTooLarge,
    ExecutionTimeout,
    OperationFailure,
    PyMongoError,
    WTimeoutError,
)

from agent_framework_mongodb.errors import (
    MongoDBAuthorizationError,
    MongoDBCheckpointStorageError,
    MongoDBOperationError,
    MongoDBSerializationError,
    MongoDBTransientPersistenceError,
    MongoDBTransientRetrievalError,
)

__all__ = ["FEATURE", "Completion", "driver_errors", "logger"]

FEATURE = "workflow_checkpoint_storage"
logger = logging.getLogger("agent_framework_mongodb")
# A library configures no output: without this, a failure line of an
# application that never configured logging would reach stderr through
# Python's last-resort handler.
logger.addHandler(logging.NullHandler())
_AUTH_CODES = frozenset({13, 18, 8000})  # Unauthorized, AuthenticationFailed, Atlas


@contextmanager
def driver_errors(*, write: bool) -> Iterator[None]:
    """Re-raise PyMongo errors as the package's stable categories, driver error as cause."""
    try:
        yield
    except PyMongoError as exc:
        raise translate(exc, write=write) from exc


def translate(exc: PyMongoError, *, write: bool) -> MongoDBCheckpointStorageError:
    if isinstance(exc, DocumentTooLarge):  # a server with a smaller limit than 16 MiB
        return MongoDBSerializationError("the checkpoint document is larger than MongoDB stores")
    if isinstance(exc, ConnectionFailure | ExecutionTimeout | WTimeoutError):
        if write:
            return MongoDBTransientPersistenceError("MongoDB write did not complete (transient)")
        return MongoDBTransientRetrievalError("MongoDB read did not complete (transient)")
    if isinstance(exc, OperationFailure) and exc.code in _AUTH_CODES:
        return MongoDBAuthorizationError("MongoDB refused the operation (not authorized)")
    return MongoDBOperationError("MongoDB operation failed")


class Completion:
    """Times one operation and logs its completion, whatever the outcome.

    Used as ``with Completion("load") as done: ...; done.count = 1``. It never
    suppresses an exception (cancellation included); it only observes it.
    """

    __slots__ = ("count", "operation", "started")

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.count = 0
        self.started = 0.0

    def __enter__(self) -> Completion:
        self.started = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        duration_ms = (time.perf_counter() - self.started) * 1000
        if exc is None:
            outcome, category, level = "succeeded", "none", logging.DEBUG
        elif isinstance(exc, asyncio.CancelledError):
            outcome, category, level = "cancelled", "cancelled", logging.DEBUG
        else:
            category = "unexpected"
            if isinstance(exc, MongoDBCheckpointStorageError):
                category = exc.category
            outcome, level = "failed", logging.WARNING
        logger.log(
            level,
            "feature=%s operation=%s outcome=%s count=%d duration_ms=%.3f category=%s",
            FEATURE,
            self.operation,
            outcome,
            self.count,
            duration_ms,
            category,
        )
