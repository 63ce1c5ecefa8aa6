"""The SQLite backend: one file, WAL, one writer thread with group commit."""

from __future__ import annotations

from agentflow.checkpoint.sqlite.checkpointer import (
    SCHEMA_VERSION,
    SYNCHRONOUS_MODES,
    SqliteCheckpointer,
)
from agentflow.errors import InvalidStoreUrl

__all__ = ["SCHEMA_VERSION", "SYNCHRONOUS_MODES", "SqliteCheckpointer", "from_url"]


def from_url(url: str, *, namespace: str | None = None) -> SqliteCheckpointer:
    """``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``, as in SQLAlchemy."""
    rest = url.split("://", 1)[1]
    path = rest[1:] if rest.startswith("/") else rest
    if not path:
        raise InvalidStoreUrl(f"store URL {url!r} names no database file")
    return SqliteCheckpointer(path, namespace=namespace)
