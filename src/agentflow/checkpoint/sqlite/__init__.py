"""The SQLite backend: one file, WAL, one writer thread with group commit; the whole store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.sqlite.schema import SCHEMA_VERSION
from agentflow.checkpoint.sqlite.store import SYNCHRONOUS_MODES, SqliteCheckpointer
from agentflow.checkpoint.stores import local_path
from agentflow.errors import InvalidStoreUrl

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["SCHEMA_VERSION", "SYNCHRONOUS_MODES", "SqliteCheckpointer", "from_url"]


def from_url(
    url: str,
    *,
    namespace: str | None = None,
    codec: CheckpointCodec | None = None,
    sealing: KeyRing | None = None,
    create: bool = True,
) -> SqliteCheckpointer:
    """``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``, as in SQLAlchemy."""
    path = local_path(url)
    if path is None:
        raise InvalidStoreUrl(f"store URL {url!r} is not a sqlite:/// URL")
    return SqliteCheckpointer(
        path, namespace=namespace, codec=codec, sealing=sealing, create=create
    )
