"""Opening a checkpointer from a store URL (``--store`` or ``AGENTFLOW_STORE``).

The one place the command line names backends: each is imported only when
its scheme is used, so a missing optional driver fails only the command that
needs it, with the ``pip install`` line that fixes it.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from agentflow.checkpoint.base import Checkpointer
from agentflow.errors import InvalidArgument

__all__ = ["DEFAULT_STORE", "InvalidStoreUrl", "Store", "open_store", "safe_url"]

DEFAULT_STORE = "sqlite:///.runs/checkpoints.db"

#: scheme -> (module, class, optional-dependency extra)
_BACKENDS = {
    "sqlite": ("agentflow.checkpoint.sqlite", "SqliteCheckpointer", None),
    "file": ("agentflow.checkpoint.file", "FileCheckpointer", None),
    "postgresql": ("agentflow.checkpoint.postgres", "PostgresCheckpointer", "postgres"),
    "postgres": ("agentflow.checkpoint.postgres", "PostgresCheckpointer", "postgres"),
    "redis": ("agentflow.checkpoint.redis", "RedisCheckpointer", "redis"),
    "rediss": ("agentflow.checkpoint.redis", "RedisCheckpointer", "redis"),
    "mongodb": ("agentflow.checkpoint.mongodb", "MongoCheckpointer", "mongodb"),
    "mongodb+srv": ("agentflow.checkpoint.mongodb", "MongoCheckpointer", "mongodb"),
}


class Store(Checkpointer, Protocol):
    """A checkpointer the command line opened and therefore closes."""

    async def close(self) -> None: ...


class InvalidStoreUrl(InvalidArgument):
    """The store URL has an unknown scheme or no path/host."""

    code = "invalid_store_url"


def safe_url(url: str) -> str:
    """``url`` with any password masked, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _location(url: str, scheme: str) -> str:
    """The path of a ``sqlite:///`` or ``file://`` URL.

    ``sqlite:///runs.db`` is relative and ``sqlite:////tmp/runs.db`` absolute,
    as in SQLAlchemy; ``file://`` is followed directly by the directory.
    """
    rest = url[len(scheme) + 3 :]
    path = rest[1:] if scheme == "sqlite" and rest.startswith("/") else rest
    if not path:
        raise InvalidStoreUrl(f"store URL {url!r} names no path")
    return path


def open_store(url: str, *, namespace: str | None = None) -> Store:
    """A checkpointer for ``url``; the caller closes it."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in _BACKENDS:
        raise InvalidStoreUrl(
            f"unsupported store URL {safe_url(url)!r}; use sqlite:///PATH, file://DIR, "
            "postgresql://..., redis://... or mongodb://..."
        )
    module_name, class_name, extra = _BACKENDS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"; install it with: pip install 'agentflow[{extra}]'" if extra else ""
        raise InvalidStoreUrl(f"the {scheme} backend is not available ({exc}){hint}") from exc
    factory: Any = getattr(module, class_name)
    if scheme in ("sqlite", "file"):
        return factory(_location(url, scheme), namespace=namespace)  # type: ignore[no-any-return]
    return factory(url, namespace=namespace)  # type: ignore[no-any-return]
