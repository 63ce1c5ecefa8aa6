"""Opening a checkpointer from a store URL (``--store`` or ``AGENTFLOW_STORE``).

The one place the command line names backends: each is imported only when
its scheme is used, so a missing optional driver fails only the command that
needs it, with the ``pip install`` line that fixes it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from agentflow.checkpoint.base import Checkpointer
from agentflow.errors import InvalidArgument

__all__ = [
    "DEFAULT_STORE",
    "InvalidStoreUrl",
    "Store",
    "has_password",
    "local_path",
    "open_store",
    "safe_url",
    "server_hosts",
]

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


def _userinfo_and_hosts(url: str) -> tuple[str, str]:
    """The ``user:password`` and ``host:port[,host:port]`` parts of ``url``'s netloc
    (read as text: a MongoDB seed list is not one host and port)."""
    userinfo, at, hosts = urlsplit(url).netloc.rpartition("@")
    return (userinfo, hosts) if at else ("", hosts)


def has_password(url: str) -> bool:
    """True when ``url`` carries a password."""
    return ":" in _userinfo_and_hosts(url)[0]


def safe_url(url: str) -> str:
    """``url`` with any password masked, for messages and logs."""
    userinfo, hosts = _userinfo_and_hosts(url)
    if ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return urlunsplit(urlsplit(url)._replace(netloc=f"{user}:***@{hosts}"))


def server_hosts(url: str) -> str:
    """The ``host:port`` list of a server URL, without credentials."""
    return _userinfo_and_hosts(url)[1]


def local_path(url: str) -> Path | None:
    """Where a ``sqlite:///`` or ``file://`` store lives; None for a server URL."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    return Path(_location(url, scheme)) if scheme in ("sqlite", "file") else None


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
