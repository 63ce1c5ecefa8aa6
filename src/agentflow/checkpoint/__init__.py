"""Checkpointing: durable run state, resume, and time travel.

The model and protocol live in :mod:`agentflow.checkpoint.base`; the
:class:`Store` protocol (one object per database holding a thread's
checkpoints, durable record and events) in :mod:`agentflow.checkpoint.store`;
the base every backend builds on in :mod:`agentflow.checkpoint.store_base`,
and each backend in its own subpackage. Backends with optional dependencies (PostgreSQL, Redis,
MongoDB) are imported lazily, so ``import agentflow.checkpoint`` needs none of
them installed. :func:`open_store` opens any of them from a URL.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentflow.checkpoint.backend import CheckpointerBase
from agentflow.checkpoint.base import (
    Checkpoint,
    Checkpointer,
    Redactor,
    ThreadInfo,
    ThreadPage,
    ThreadStatus,
    with_defaults,
)
from agentflow.checkpoint.codec import CheckpointCodec, JsonCodec, RecordKey
from agentflow.checkpoint.memory import MemoryCheckpointer, MemoryStore
from agentflow.checkpoint.redaction import DEFAULT_MASK, RedactKeys, redact_none
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.stores import open_store, register_scheme

if TYPE_CHECKING:
    from agentflow.checkpoint.file import FileCheckpointer
    from agentflow.checkpoint.mongodb import MongoCheckpointer
    from agentflow.checkpoint.postgres import PostgresCheckpointer
    from agentflow.checkpoint.redis import RedisCheckpointer
    from agentflow.checkpoint.sqlite import SqliteCheckpointer

__all__ = [
    "DEFAULT_MASK",
    "Checkpoint",
    "CheckpointCodec",
    "Checkpointer",
    "CheckpointerBase",
    "FileCheckpointer",
    "JsonCodec",
    "MemoryCheckpointer",
    "MemoryStore",
    "MongoCheckpointer",
    "PostgresCheckpointer",
    "RecordKey",
    "RedactKeys",
    "Redactor",
    "RedisCheckpointer",
    "SqliteCheckpointer",
    "Store",
    "ThreadInfo",
    "ThreadPage",
    "ThreadStatus",
    "open_store",
    "redact_none",
    "register_scheme",
    "with_defaults",
]

_LAZY = {
    "FileCheckpointer": "agentflow.checkpoint.file",
    "SqliteCheckpointer": "agentflow.checkpoint.sqlite",
    "PostgresCheckpointer": "agentflow.checkpoint.postgres",
    "RedisCheckpointer": "agentflow.checkpoint.redis",
    "MongoCheckpointer": "agentflow.checkpoint.mongodb",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agentflow.checkpoint' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
