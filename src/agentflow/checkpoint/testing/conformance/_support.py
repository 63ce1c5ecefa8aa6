"""What the conformance modules share: reading helpers and the ids they store."""

from __future__ import annotations

from typing import Any

from agentflow.checkpoint.base import Checkpoint, Checkpointer

__all__ = [
    "HOSTILE_THREAD_IDS",
    "PATH_LIKE_THREAD_IDS",
    "UNICODE_THREAD_IDS",
    "fields_of",
    "history_of",
    "thread_ids",
]

UNICODE_THREAD_IDS = ["スレッド-🧵", "Ünïcödé", "مرحبا", "emoji-👩‍💻-z", "tab\there", "line\nbreak"]
#: Ids that are syntax somewhere (SQL, glob, LIKE, Mongo query, key patterns).
HOSTILE_THREAD_IDS = [
    "'; DROP TABLE checkpoints; --",
    "*",
    '{"$gt": ""}',
    "%",
    "_",
    "a:b:cp:1",
    "\U0010ffff",
]
#: Ids that a file-system backend refuses by design.
PATH_LIKE_THREAD_IDS = ["..", ".", "a/b", "a\\b", "\\", "x" * 300]


async def history_of(cp: Checkpointer, thread: str) -> list[Checkpoint]:
    """The whole history of ``thread`` as a list."""
    return [c async for c in cp.history(thread)]


async def thread_ids(cp: Checkpointer) -> list[str]:
    """Every thread id of ``cp``'s namespace, in listing order."""
    return [info.thread for info in await cp.list_threads(limit=10_000)]


def fields_of(cp: Checkpoint) -> dict[str, Any]:
    """The dataclass fields of ``cp`` as a dict."""
    return {name: getattr(cp, name) for name in Checkpoint.__dataclass_fields__}
