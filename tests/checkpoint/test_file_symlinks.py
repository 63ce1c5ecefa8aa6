"""The file store never follows a symbolic link planted under its root.

Each case plants links, at one level of the layout, to a directory outside
the store that holds tempting copies of the store's own files; then every
method runs. Each call either works without the link or raises
CheckpointCorrupted (naming the thread where there is one, never the place
outside), and afterwards nothing outside the root was read into a result,
written, created or deleted.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentflow.checkpoint.base import Checkpointer
from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.testing.harness import make_checkpoint
from agentflow.errors import CheckpointCorrupted

NOW = "2026-06-01T12:00:00+00:00"
DUE = "2026-06-01T11:00:00+00:00"
NAMESPACE = "acme"

#: Plants links under ``base`` (the namespace's directory) or ``root`` towards ``outside``.
Plant = Callable[[Path, Path, Path], None]


def _link(at: Path, target: Path) -> None:
    if at.is_dir() and not at.is_symlink():
        shutil.rmtree(at)
    elif at.exists() or at.is_symlink():
        at.unlink()
    at.symlink_to(target)


def _every_stripe(root: Path, base: Path, outside: Path) -> None:
    for stripe in range(1024):
        (base / ".locks" / f"{stripe:03x}").unlink(missing_ok=True)
        (base / ".locks" / f"{stripe:03x}").symlink_to(outside / f"lock-{stripe:03x}")


PLANTS: dict[str, Plant] = {
    "namespace directory": lambda root, base, outside: _link(base, outside / "copy"),
    "namespaces directory": lambda root, base, outside: _link(root / ".ns", outside / "nsroot"),
    "thread directory": lambda root, base, outside: _link(base / "t", outside / "copy" / "t"),
    "step file": lambda root, base, outside: _link(
        base / "t" / "000001.json", outside / "copy" / "t" / "000001.json"
    ),
    "head": lambda root, base, outside: _link(
        base / "t" / ".head", outside / "copy" / "t" / "000001.json"
    ),
    "lock stripes": _every_stripe,
    "lock directory": lambda root, base, outside: _link(base / ".locks", outside / "locks"),
    "status index": lambda root, base, outside: _link(
        base / ".status" / "running", outside / "index"
    ),
    "due index": lambda root, base, outside: _link(base / ".due", outside / "index"),
    "layout file": lambda root, base, outside: _link(base / ".layout", outside / "layout"),
    "cursor secret": lambda root, base, outside: _link(root / ".cursor-secret", outside / "secret"),
    "trash": lambda root, base, outside: _link(base / ".trash", outside / "copy"),
    "temp file": lambda root, base, outside: _link(
        base / "t" / ".1.0123456789ab.tmp", outside / "copy" / "t" / "000001.json"
    ),
}
#: Plants every method may ignore: names that no call ever opens.
IGNORED = {"temp file"}
#: Plants at or below a thread: the error names the thread.
THREAD_LEVEL = {"thread directory", "step file", "head", "lock stripes"}

#: (the thread a call is about, None for a listing; the call)
CALLS: list[tuple[str | None, Callable[[Checkpointer], Awaitable[Any]]]] = [
    ("t", lambda cp: cp.get("t")),
    ("t", lambda cp: cp.get("t", 1)),
    ("t", lambda cp: _history(cp, "t")),
    (None, lambda cp: cp.list_threads()),
    (None, lambda cp: cp.list_threads_page(status="running")),
    (None, lambda cp: cp.list_due(NOW)),
    (None, lambda cp: cp.list_threads_page(limit=1)),
    ("t", lambda cp: cp.put(make_checkpoint("t", 2, next=("n",)))),
    ("t", lambda cp: cp.put(make_checkpoint("t", 1, next=("n",)))),
    ("fresh", lambda cp: cp.put(_waiting("fresh"))),
    ("t", lambda cp: cp.prune("t", before_step=1)),
    ("t", lambda cp: cp.prune("t", older_than="2999-01-01T00:00:00Z")),
    ("t", lambda cp: cp.delete_thread("t")),
    ("w", lambda cp: cp.delete_thread("w")),
]


async def _history(cp: Checkpointer, thread: str) -> list[Any]:
    return [c async for c in cp.history(thread)]


def _waiting(thread: str) -> Any:
    return make_checkpoint(thread, 0, next=("n",), interrupted=True, wake_at=DUE)


def _snapshot(top: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under ``top``: its kind, content (or link target), mode and times."""
    seen: dict[str, tuple[Any, ...]] = {}
    for path in [top, *top.rglob("*")]:
        info = path.lstat()
        if path.is_symlink():
            content: Any = os.readlink(path)
        elif path.is_file():
            content = path.read_bytes()
        else:
            content = sorted(p.name for p in path.iterdir())
        seen[str(path.relative_to(top))] = (content, info.st_mode, info.st_mtime_ns)
    return seen


async def _store(root: Path) -> None:
    async with FileCheckpointer(root, namespace=NAMESPACE) as cp:
        await cp.put(make_checkpoint("t", 0, next=("n",)))
        await cp.put(make_checkpoint("t", 1, next=("n",)))
        await cp.put(_waiting("w"))
        await cp.put(make_checkpoint("u", 0, next=("n",)))
        assert (await cp.list_threads_page(limit=1)).next_cursor is not None


@pytest.mark.parametrize("plant", sorted(PLANTS))
async def test_a_planted_link_is_refused_and_nothing_outside_changes(
    tmp_path: Path, plant: str
) -> None:
    root = tmp_path / "store"
    base = root / ".ns" / NAMESPACE.encode().hex()
    outside = tmp_path / "outside"
    await _store(root)
    # Outside: a copy of the whole store, so every link leads to something readable.
    shutil.copytree(base, outside / "copy", symlinks=True)
    shutil.copytree(root, outside / "nsroot", symlinks=True)
    (outside / "locks").mkdir()
    (outside / "index").mkdir()
    (outside / "index" / "t").write_bytes(b"")
    (outside / "layout").write_bytes(b"2\n")
    (outside / "secret").write_bytes(os.urandom(32))
    PLANTS[plant](root, base, outside)
    before = _snapshot(outside)

    refused: list[int] = []
    async with FileCheckpointer(root, namespace=NAMESPACE) as cp:
        for number, (thread, call) in enumerate(CALLS):
            try:
                await call(cp)
            except CheckpointCorrupted as exc:
                refused.append(number)
                message = str(exc)
                assert str(outside) not in message and "outside" not in message, message
                assert "symbolic link" in message, message
                if plant in THREAD_LEVEL:
                    assert (f"thread {thread!r}" if thread else "thread '") in message, message

    assert _snapshot(outside) == before, "something outside the root changed"
    if plant in IGNORED:
        assert refused == []
    else:
        assert refused, "no call noticed the link"
