"""``copy`` loses nothing by default: a destination thread ahead of the source is
kept unless a flag names that risk, and an id the destination cannot hold is
skipped and listed while the rest is copied and verified."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from tests.cli.support import af

#: Ids a ``file://`` store cannot hold as one file name each.
UNHOLDABLE = ["a/b", "..", ".hidden", "x" * 256]


async def _steps(db: Path, thread: str, steps: int, tag: str) -> None:
    async with SqliteCheckpointer(db) as store:
        for step in range(steps):
            await store.put(make_checkpoint(thread, step, state={"step": step, "tag": tag}))


async def _history(db: Path, thread: str) -> list[tuple[int, str]]:
    async with SqliteCheckpointer(db) as store:
        return [(cp.step, cp.state["tag"]) async for cp in store.history(thread)]


def test_a_destination_ahead_of_the_source_is_kept_unless_overwrite_newer(tmp_path: Path) -> None:
    backup, live = tmp_path / "backup.db", tmp_path / "live.db"
    asyncio.run(_steps(backup, "order", 3, "old"))  # steps 0-2, taken a while ago
    asyncio.run(_steps(live, "order", 6, "live"))  # the live store went on to step 5
    asyncio.run(_steps(backup, "other", 1, "old"))
    args = ["copy", f"sqlite:///{backup}", f"sqlite:///{live}"]
    for flags in ([], ["--overwrite"]):
        refused = af(tmp_path, *args, *flags, check=False)
        assert refused.returncode == 1, refused.stderr
        assert "1 thread(s) are ahead at the destination" in refused.stderr
        assert (
            "'order'" in refused.stderr and "only --overwrite-newer replaces them" in refused.stderr
        )
        assert "1 copied" in refused.stdout or "1 already there" in refused.stdout
        assert asyncio.run(_history(live, "order")) == [(s, "live") for s in range(6)]
    report = json.loads(af(tmp_path, *args, "--overwrite", "--json", check=False).stdout)
    assert report["newer"] == ["order"] and report["refused"] == ["order"]
    assert report["replaced"] == 0
    forced = af(tmp_path, *args, "--overwrite-newer")
    assert "1 replaced" in forced.stdout and "verified: every copied thread" in forced.stdout
    assert asyncio.run(_history(live, "order")) == [(s, "old") for s in range(3)]


def test_a_newer_write_of_the_same_latest_step_is_ahead_too(tmp_path: Path) -> None:
    source, destination = tmp_path / "source.db", tmp_path / "destination.db"
    asyncio.run(_steps(source, "t", 2, "source"))
    asyncio.run(_steps(destination, "t", 2, "destination"))  # written after the source's
    done = af(tmp_path, "copy", f"sqlite:///{source}", f"sqlite:///{destination}", "--overwrite",
              check=False)  # fmt: skip
    assert done.returncode == 1 and "are ahead at the destination" in done.stderr
    assert asyncio.run(_history(destination, "t"))[-1] == (1, "destination")


async def _hostile_source(db: Path) -> None:
    async with SqliteCheckpointer(db) as store:
        for thread in [*UNHOLDABLE, *(f"fine-{i:02}" for i in range(46))]:
            for step in range(2):
                await store.put(make_checkpoint(thread, step, state={"n": step}))


def test_ids_the_destination_cannot_hold_are_skipped_listed_and_counted(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    asyncio.run(_hostile_source(source))
    args = ["copy", f"sqlite:///{source}", f"file://{tmp_path}/files"]
    done = af(tmp_path, *args, check=False)
    assert done.returncode == 1, done.stderr
    assert (
        "threads: 50 (46 copied, 0 already there, 0 replaced, 0 refused, 4 skipped)" in done.stdout
    )
    assert "verified: every copied thread" in done.stdout
    for thread in UNHOLDABLE:
        assert f"skipped {thread!r}: thread id" in done.stdout
    assert "4 thread id(s) the destination cannot hold were skipped" in done.stderr
    assert len(list((tmp_path / "files").iterdir())) >= 46
    again = json.loads(af(tmp_path, *args, "--json", check=False).stdout)
    assert again["unchanged"] == 46 and sorted(s["thread"] for s in again["skipped"]) == sorted(
        UNHOLDABLE
    )
    assert again["verified"] is True
