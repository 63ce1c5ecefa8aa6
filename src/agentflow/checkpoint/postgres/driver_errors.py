"""asyncpg's failures as agentflow errors, naming the call and where the server is.

Lost connections (client-side errors, SQLSTATE classes 08 and 57P, too many
connections) are retryable; a server limit hit by the input (class 54, an
index entry too large) or a value it refuses (class 22) is bad input, its
statement rolled back; XX001/XX002 is damaged storage. A message names the
public call and the server's ``host:port``, never a user or password.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

import asyncpg

from agentflow.errors import (
    AgentflowError,
    CheckpointCorrupted,
    CheckpointError,
    InvalidArgument,
    StoreUnavailable,
)

__all__ = ["DRIVER_ERRORS", "address_of", "driver_error"]

#: Client-side failures that leave a connection unusable. InternalClientError is
#: what asyncpg raises when the server closed an idle connection it has not yet
#: noticed ("another operation is in progress").
_CLIENT_LOSS: Final = (OSError, asyncpg.InterfaceError, asyncpg.InternalClientError)
DRIVER_ERRORS: Final = (*_CLIENT_LOSS, asyncpg.PostgresError)


def _lost_connection(exc: BaseException) -> bool:
    if isinstance(exc, asyncpg.ClientConfigurationError):
        return False
    if isinstance(exc, _CLIENT_LOSS):
        return True
    state = getattr(exc, "sqlstate", None) or ""
    return state.startswith(("08", "57P")) or state == "53300"


def _dsn_where(dsn: str) -> tuple[str, str]:
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    hosts = parts.netloc.rpartition("@")[2] or ",".join(query.get("host", [])) or "localhost"
    address = hosts if ":" in hosts or hosts.startswith("/") else f"{hosts}:5432"
    user = parts.username or "".join(query.get("user", []))  # the database's default name
    return address, f"{address}/{parts.path.lstrip('/') or ''.join(query.get('dbname', [user]))}"


def address_of(dsn: str, pool: Any) -> tuple[str, str]:
    """``host:port`` of the DSN, or of an injected asyncpg pool's connect arguments,
    and the database there as ``host:port/name`` (never a user or password; a
    pool that tells neither is named by its identity)."""
    pool_dsn = dsn if pool is None else (getattr(pool, "_connect_args", None) or (None,))[0]
    if isinstance(pool_dsn, str):
        return _dsn_where(pool_dsn)
    kwargs = getattr(pool, "_connect_kwargs", None) or {}
    host = kwargs.get("host")
    address = "the caller's pool" if host is None else f"{host}:{kwargs.get('port') or 5432}"
    return address, f"{address}/{kwargs.get('database') or f'pool-{id(pool):x}'}"


def driver_error(exc: Exception, operation: str, where: str) -> AgentflowError | None:
    """The agentflow error for ``exc`` raised during ``operation``, or None if
    ``exc`` is not asyncpg's (nor a socket's)."""
    # A transaction that lost its connection fails again in its rollback; the
    # loss itself is the context of that second error, and the news.
    context = exc.__context__
    if isinstance(context, Exception) and _lost_connection(context):
        exc = context
    if not isinstance(exc, DRIVER_ERRORS):
        return None
    state = getattr(exc, "sqlstate", None) or ""
    if _lost_connection(exc):
        return StoreUnavailable(
            f"the connection to PostgreSQL at {where} failed during {operation}: {exc}"
        )
    if state.startswith(("54", "22")):
        return InvalidArgument(f"PostgreSQL at {where} refused the input of {operation}: {exc}")
    if state in ("XX001", "XX002"):
        return CheckpointCorrupted(
            f"PostgreSQL at {where} read damaged data during {operation}: {exc}"
        )
    return CheckpointError(f"PostgreSQL at {where} failed during {operation} ({state}): {exc}")
