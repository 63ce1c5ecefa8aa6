"""redis-py's exceptions as agentflow's errors."""

from __future__ import annotations

from typing import Final

from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    NoPermissionError,
    ReadOnlyError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agentflow.errors import AgentflowError, CheckpointCorrupted, CheckpointError, StoreUnavailable

__all__ = ["driver_error"]

#: Server replies that mean "try again shortly", not "this request is wrong".
_TRANSIENT: Final = ("BUSY", "LOADING", "MASTERDOWN", "TRYAGAIN")


def _refused_access(exc: BaseException | None) -> bool:
    """A wrong password or a missing permission: retrying will not help.
    redis-py re-raises these at connect as a plain ConnectionError."""
    while exc is not None:
        if isinstance(exc, AuthenticationError | AuthorizationError | NoPermissionError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def driver_error(exc: Exception, operation: str, where: str) -> AgentflowError | None:
    """The error for ``exc`` raised during public ``operation`` on the server
    at ``where`` (host:port or socket path), or None for a non-Redis error."""
    if not isinstance(exc, RedisError):
        return None
    text = str(exc).split(" script: ", 1)[0]
    message = f"redis {operation} on {where} failed: {text}"
    if _refused_access(exc):
        return CheckpointError(message)
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | ReadOnlyError):
        return StoreUnavailable(message)
    if isinstance(exc, ResponseError):
        if text.startswith(("AGENTFLOW_CORRUPT", "WRONGTYPE")):
            return CheckpointCorrupted(
                f"redis {operation} on {where}: stored data is damaged: {text}"
            )
        if text.startswith(_TRANSIENT):
            return StoreUnavailable(message)
    return CheckpointError(message)
