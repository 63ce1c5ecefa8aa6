"""The SQLite backend: one file, WAL, one writer thread with group commit."""

from __future__ import annotations

from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.sqlite.checkpointer import (
    SCHEMA_VERSION,
    SYNCHRONOUS_MODES,
    SqliteCheckpointer,
)
from agentflow.checkpoint.stores import local_path
from agentflow.errors import InvalidStoreUrl

__all__ = ["SCHEMA_VERSION", "SYNCHRONOUS_MODES", "SqliteCheckpointer", "from_url"]


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    codec: CheckpointCodec | None = None,
    create: bool = True,
) -> SqliteCheckpointer:
    """``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``, as in SQLAlchemy."""
    path = local_path(url)
    if path is None:
        raise InvalidStoreUrl(f"store URL {url!r} is not a sqlite:/// URL")
    return SqliteCheckpointer(path, namespace=namespace, codec=codec, create=create)
