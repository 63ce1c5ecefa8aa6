"""The file durable backend in the shared suites: one fresh store directory per test."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable.stores.file import FileDurableStore
from agentflow.durable.stores.file_events import FileRunEventStore
from agentflow.durable.stores.file_names import key_path
from agentflow.durable.testing import DurableHarness


def run_dir(root: Path, namespace: str | None, key: str) -> Path:
    """Where the store keeps the run ``key`` of ``namespace`` under ``root``."""
    base = root / ".ns" / namespace.encode().hex() if namespace else root
    return base.joinpath(".durable", "runs", *key_path(key))


def part_file(root: Path, namespace: str | None, key: str, part: str) -> Path:
    """The file holding one part: ``body.<g>``, ``t.<i>.<g>`` / ``m.<i>.<g>`` of
    the run, or the accepted event's file (a header line, then its payload)."""
    if part == "event":
        base = root / ".ns" / namespace.encode().hex() if namespace else root
        name = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
        return base / ".durable" / "events" / "ids" / name
    pattern = "body.*" if part == "body" else f"{part[0]}.{part.partition('.')[2]}.*"
    found = list(run_dir(root, namespace, key).glob(pattern))
    assert len(found) == 1, f"no stored {part} for {(namespace, key)}"
    return found[0]


def read_part(root: Path, namespace: str | None, key: str, part: str) -> bytes:
    data = part_file(root, namespace, key, part).read_bytes()
    return data.partition(b"\n")[2] if part == "event" else data


def write_part(root: Path, namespace: str | None, key: str, part: str, data: bytes) -> None:
    """In place, as a disk fault would (an event keeps its header line)."""
    path = part_file(root, namespace, key, part)
    if part == "event":
        data = path.read_bytes().partition(b"\n")[0] + b"\n" + data
    with path.open("r+b") as file:
        file.write(data)
        file.truncate()


def contents(root: Path) -> list[str]:
    """Every path under ``root`` (none when it does not exist)."""
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@asynccontextmanager
async def harness(tmp_path: Path) -> AsyncIterator[DurableHarness]:
    root = tmp_path / "file-store"

    async def corrupt(namespace: str | None, key: str) -> None:
        # In place, as a disk fault would: the body file the head names.
        bodies = list(run_dir(root, namespace, key).glob("body.*"))
        assert len(bodies) == 1, f"no stored body for {(namespace, key)}"
        bodies[0].write_bytes(b'{"not": 1}')

    def stores(namespace: str | None, sealing: KeyRing | None = None) -> FileDurableStore:
        return FileDurableStore(root, namespace=namespace, sealing=sealing)

    def event_stores(namespace: str | None, sealing: KeyRing | None = None) -> FileRunEventStore:
        return FileRunEventStore(root, namespace=namespace, sealing=sealing)

    yield DurableHarness(
        name="file",
        stores=stores,
        event_stores=event_stores,
        corrupt=corrupt,
        readers=lambda namespace: FileDurableStore(root, namespace=namespace, create=False),
        contents=lambda: asyncio.to_thread(contents, root),
        sealed_stores=stores,
        sealed_event_stores=event_stores,
        read_part=lambda *where: asyncio.to_thread(read_part, root, *where),
        write_part=lambda *change: asyncio.to_thread(write_part, root, *change),
    )
