"""PyMongo's and BSON's errors as agentflow's, for the MongoDB backend."""

from __future__ import annotations

from typing import Final

from bson.errors import BSONError, InvalidBSON
from pymongo.errors import BulkWriteError, ConnectionFailure, PyMongoError, WriteConcernError

from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    StoreUnavailable,
)

__all__ = ["driver_error"]

#: Server error codes for a document over MongoDB's limits: the input's fault.
_TOO_LARGE: Final = frozenset({10334, 17419, 17420})
#: Server error codes for an operator applied to a field of the wrong type: the
#: stored document is not one this backend wrote (``$inc`` on a text revision).
_DAMAGED: Final = frozenset({14})


def _codes(exc: PyMongoError) -> set[int]:
    if isinstance(exc, BulkWriteError):
        return {e.get("code") for e in exc.details.get("writeErrors", [])} - {None}
    code = getattr(exc, "code", None)
    return {code} if isinstance(code, int) else set()


def _unavailable(exc: PyMongoError) -> bool:
    """A dropped connection, a failover, or a timeout: the same call may succeed later."""
    return (
        isinstance(exc, ConnectionFailure | WriteConcernError)
        or exc.timeout
        or exc.has_error_label("RetryableWriteError")
        or (isinstance(exc, BulkWriteError) and bool(exc.details.get("writeConcernErrors")))
    )


def driver_error(exc: Exception, operation: str, where: str) -> AgentflowError | None:
    """The agentflow error for a PyMongo or BSON error raised during ``operation``.

    The message names the operation, the server's host:port (never a password)
    and the error class and codes, not the driver's message, which can carry
    query fragments.
    """
    if not isinstance(exc, PyMongoError):  # BSON's errors, DocumentTooLarge among them
        if isinstance(exc, InvalidBSON):
            return CheckpointCorrupted(f"MongoDB at {where}: undecodable BSON during {operation}")
        if isinstance(exc, BSONError):
            return InvalidArgument(
                f"MongoDB at {where} cannot store the document during {operation}: "
                f"{type(exc).__name__}"
            )
        return None
    codes = _codes(exc)
    detail = type(exc).__name__ + (f" (code {', '.join(map(str, sorted(codes)))})" if codes else "")
    if _unavailable(exc):
        return StoreUnavailable(f"MongoDB at {where} unavailable during {operation}: {detail}")
    if codes & _TOO_LARGE:
        return InvalidArgument(
            f"MongoDB at {where} refused a document as too large during {operation}: {detail}"
        )
    if codes & _DAMAGED:
        return CheckpointCorrupted(
            f"MongoDB at {where} met a damaged stored document during {operation}: {detail}"
        )
    return CheckpointError(f"MongoDB at {where} failed during {operation}: {detail}")
