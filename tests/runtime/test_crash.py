"""SIGKILL a run at random points; resuming must end in the uninterrupted state.

A run killed during a step holds a lease until it lapses (``LEASE``); a
resume before then is told who holds it, and one after takes it over.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.runtime import CompiledGraph, RunResult, StepClaimed
from tests.runtime.conftest import needs_sqlite
from tests.runtime.crash_child import DELAY, LEASE, ROUNDS
from tests.runtime.graphs import counter_graph, counter_input

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 6


def _start(db: Path, thread: str, mode: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.crash_child", str(db), thread, mode],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def _kill_after(child: subprocess.Popen[str], seconds: float) -> None:
    time.sleep(seconds)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)


async def _uninterrupted(tmp_path: Path) -> dict[str, object]:
    db = tmp_path / "reference.db"
    async with SqliteCheckpointer(db) as store:
        compiled = counter_graph().compile(store)
        result = await compiled.run(counter_input(ROUNDS, DELAY), thread="x")
        return dict(result.state)


async def _resume_once_the_lease_lapses(compiled: CompiledGraph) -> RunResult:
    deadline = time.monotonic() + 10 * LEASE.total_seconds()
    while True:
        try:
            return await compiled.resume("run")
        except StepClaimed:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(LEASE.total_seconds() / 5)


@pytest.mark.slow
@needs_sqlite
async def test_killed_runs_resume_to_the_uninterrupted_state(tmp_path: Path) -> None:
    expected = await _uninterrupted(tmp_path)
    rng = random.Random(os.environ.get("AGENTFLOW_CRASH_SEED", "4"))
    for trial in range(TRIALS):
        db = tmp_path / f"trial{trial}.db"
        _kill_after(_start(db, "run", "run"), rng.uniform(0, 0.25))
        if trial % 2 == 0:  # a second kill, this time of the resuming process
            async with SqliteCheckpointer(db) as store:
                started = await store.get("run") is not None
            if started:
                _kill_after(_start(db, "run", "resume"), rng.uniform(0, 0.1))
        async with SqliteCheckpointer(db) as store:
            compiled = counter_graph().compile(store)
            latest = await store.get("run")
            if latest is None:
                await compiled.run(counter_input(ROUNDS, DELAY), thread="run")
            elif not latest.done:
                await _resume_once_the_lease_lapses(compiled)
            steps = [cp async for cp in store.history("run")]
        assert dict(steps[-1].state) == expected, f"trial {trial}"
        assert steps[-1].done
        assert [cp.step for cp in steps] == list(range(len(steps)))
        assert all(cp.revision == 1 for cp in steps)
