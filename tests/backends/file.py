"""The file backend in the shared suites: one fresh store directory per test."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentflow.checkpoint.file import FileCheckpointer
from agentflow.checkpoint.file.names import key_path
from agentflow.checkpoint.testing import BackendHarness


def base_path(root: Path, namespace: str | None) -> Path:
    """The directory of ``namespace`` under ``root``."""
    return root / ".ns" / namespace.encode().hex() if namespace else root


def step_path(root: Path, namespace: str | None, thread: str, step: int) -> Path:
    """Where the store keeps (namespace, thread, step) under ``root``."""
    return base_path(root, namespace) / thread / f"{step:06d}.json"


def run_dir(root: Path, namespace: str | None, key: str) -> Path:
    """Where the store keeps the record ``key`` of ``namespace`` under ``root``."""
    return base_path(root, namespace).joinpath(".durable", "runs", *key_path(key))


def part_file(root: Path, namespace: str | None, key: str, part: str) -> Path:
    """The file holding one part: ``body.<g>``, ``t.<i>.<g>`` / ``m.<i>.<g>`` of
    the run, or the accepted event's file (a header line, then its payload)."""
    if part == "event":
        name = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
        return base_path(root, namespace) / ".durable" / "events" / "ids" / name
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
async def harness(tmp_path: Path) -> AsyncIterator[BackendHarness]:
    root = tmp_path / "file-store"

    async def corrupt(namespace: str | None, thread: str, step: int) -> None:
        # In place, as a disk fault would: the thread's head, a link to it, sees it too.
        step_path(root, namespace, thread, step).write_bytes(b'{"format":2,"payload":\xff{')

    async def damage_revision(namespace: str | None, thread: str, step: int) -> None:
        path = step_path(root, namespace, thread, step)
        data = path.read_bytes()
        path.write_bytes(re.sub(rb'"revision":\d+', b'"revision":-7', data, count=1))

    async def read_payload(namespace: str | None, thread: str, step: int) -> bytes:
        # The whole step file: its JSON header frames the record the base checks.
        return step_path(root, namespace, thread, step).read_bytes()

    async def write_payload(namespace: str | None, thread: str, step: int, data: bytes) -> None:
        step_path(root, namespace, thread, step).write_bytes(data)

    async def corrupt_run(namespace: str | None, key: str) -> None:
        # In place, as a disk fault would: the body file the head names.
        bodies = list(run_dir(root, namespace, key).glob("body.*"))
        assert len(bodies) == 1, f"no stored body for {(namespace, key)}"
        bodies[0].write_bytes(b'{"not": 1}')

    yield BackendHarness(
        name="file",
        factory=FileCheckpointer,
        kwargs={"root": str(root)},
        restricted_thread_ids=True,
        corrupt=corrupt,
        damage_revision=damage_revision,
        read_payload=read_payload,
        write_payload=write_payload,
        corrupt_run=corrupt_run,
        contents=lambda: asyncio.to_thread(contents, root),
        read_part=lambda *where: asyncio.to_thread(read_part, root, *where),
        write_part=lambda *change: asyncio.to_thread(write_part, root, *change),
    )
