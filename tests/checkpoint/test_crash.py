"""SIGKILL a writer at random moments; every checkpoint it left must read back whole.

For the embedded backends (file, and sqlite when its module exists): a child
writes mixed-size checkpoints (CAS and unconditional) in a loop and is killed
50 times. After every kill the whole store is checked: each checkpoint decodes,
carries the digest the child sealed into its state, has a revision that never
went backwards, nothing written before is lost, and no temp file shows up as a
step (on the file backend some kills must also have left dead temp files, or
that claim was never tested). At the end the store takes new writes at once
(no lock outlives a killed writer).

Children come from a fork server with the backend preloaded: a spawned
interpreter costs about half a second to start here, which 50 kills per
backend could not afford.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import multiprocessing
import random
import signal
import time
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from tests.checkpoint import _child

KILLS = 50
#: A kill lands this long (at most) after the child is ready to write.
MAX_LIFETIME_S = 0.08
CRASH_BACKENDS = [
    name
    for name in ("file", "sqlite", "postgres")
    if importlib.util.find_spec(f"tests.backends.{name}")
]
THREADS = [f"crash-{i}" for i in range(_child.CRASH_THREADS)]

Snapshot = dict[tuple[str, int], int]


async def _check_store(harness: BackendHarness, before: Snapshot) -> Snapshot:
    """Read everything back whole; return the revision of every (thread, step)."""
    after: Snapshot = {}
    async with harness.open() as cp:
        listed = [info.thread for info in await cp.list_threads(limit=100)]
        assert set(listed) <= set(THREADS), listed
        for thread in THREADS:
            history: list[Checkpoint] = [c async for c in cp.history(thread)]
            steps = [c.step for c in history]
            assert steps == sorted(set(steps)) and set(steps) <= set(range(_child.CRASH_STEPS))
            for stored in history:
                assert stored.thread == thread and stored.revision >= 1
                assert _child.is_sealed(stored), f"{thread}:{stored.step} does not match its digest"
                assert await cp.get(thread, stored.step) == stored
                after[thread, stored.step] = stored.revision
            latest = await cp.get(thread)
            assert (latest.step if latest else None) == (steps[-1] if steps else None)
            assert (thread in listed) == bool(steps)
    for key, revision in before.items():
        assert after.get(key, 0) >= revision, (
            f"{key} went from revision {revision} to {after.get(key)}"
        )
    return after


def _dead_temp_files(root: Path) -> list[Path]:
    return list(root.glob("crash-*/.*.tmp"))


def _wait_until_ready(child: BaseProcess, ready: Event) -> None:
    """Wait for the writer to open the store; fail at once if it died trying."""
    deadline = time.monotonic() + 60
    while not ready.wait(0.05):
        assert child.is_alive(), f"the writer died before writing (exit code {child.exitcode})"
        assert time.monotonic() < deadline, "the writer never opened the store"


async def _kill_mid_write(
    ctx: multiprocessing.context.ForkServerContext, harness: BackendHarness, seed: int
) -> None:
    ready = ctx.Event()
    child = ctx.Process(target=_child.crash_writer, args=(harness.recipe, seed, ready), daemon=True)
    child.start()
    try:
        await asyncio.to_thread(_wait_until_ready, child, ready)
        await asyncio.sleep(random.Random(seed).uniform(0, MAX_LIFETIME_S))
    finally:
        child.kill()  # SIGKILL; harmless if it already died
        await asyncio.to_thread(child.join, 60)
    assert child.exitcode == -signal.SIGKILL, f"the writer died on its own ({child.exitcode})"


@pytest.mark.slow
@pytest.mark.parametrize("backend", CRASH_BACKENDS)
async def test_sigkill_leaves_only_whole_checkpoints(backend: str, tmp_path: Path) -> None:
    module = importlib.import_module(f"tests.backends.{backend}")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([_child.__name__])
    async with module.harness(tmp_path) as harness:
        snapshot: Snapshot = {}
        for seed in range(KILLS):
            await _kill_mid_write(ctx, harness, seed)
            snapshot = await _check_store(harness, snapshot)
        assert len(snapshot) >= 10, "the writer barely wrote: every kill came too early"
        if backend == "file":  # some kills must have landed mid-write, or nothing was shown
            assert _dead_temp_files(Path(harness.kwargs["root"])), "no kill landed mid-write"
        async with harness.open() as cp:
            for (thread, step), revision in snapshot.items():
                put = cp.put(make_checkpoint(thread, step), if_revision=revision)
                await asyncio.wait_for(put, 30)
                again = await cp.get(thread, step)
                assert again is not None and again.revision == revision + 1
            await asyncio.wait_for(cp.put(make_checkpoint(THREADS[0], 99)), 30)
            latest = await cp.get(THREADS[0])
            assert latest is not None and (latest.step, latest.revision) == (99, 1)
