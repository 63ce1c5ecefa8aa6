"""Leases between real processes, on every backend a process can share: no run is
run twice, none is lost."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentflow.runtime import Worker
from tests.runtime.graphs import ledger_lines, slow_charge_graph
from tests.runtime.lease_child import CLAIMED, ENDED, LEASE
from tests.runtime.shared_stores import (
    PROCESS_BACKENDS,
    SharedStore,
    on_process_backends,
    opened,
    shared_store,
)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = on_process_backends
TRIALS = 3
RUNS = 4
WORKERS = 3
#: Seconds the workers may take to finish every run (a generous bound, not a measure).
DEADLINE = 120.0
#: The workers' lease: shorter than their steps (4 leases), long enough that a renewal
#: waiting on a disk other processes fsync to (CI: several servers on one disk) is in
#: time; at 0.3 s a MongoDB renewal with its journal wait could miss it every time.
WORKER_LEASE = 1.0


@pytest.fixture(params=PROCESS_BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SharedStore]:
    async with shared_store(request.param, tmp_path) as shared:
        yield shared


def _child(store: SharedStore, mode: str, *args: str, stdin: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.lease_child", mode, *store.args, *args],
        cwd=ROOT,
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _start_together(children: list[subprocess.Popen[str]]) -> None:
    """Wait until every child is ready, then let them all go at once."""
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()


@pytest.mark.slow
async def test_two_processes_resuming_a_run_that_died_between_steps_run_it_once(
    store: SharedStore, tmp_path: Path
) -> None:
    for trial in range(TRIALS):
        thread, ledger = f"run-{trial}", tmp_path / f"ledger{trial}"
        died = _child(store, "run", thread, str(ledger))
        assert died.wait(timeout=60) == -9  # SIGKILL, in the step after a stored one
        resumers = [_child(store, "resume", thread, stdin=True) for _ in range(2)]
        await asyncio.sleep(2 * LEASE.total_seconds())  # the dead holder's lease lapses
        _start_together(resumers)
        codes = sorted(resumer.wait(timeout=60) for resumer in resumers)
        assert codes in ([0, CLAIMED], [0, ENDED]), f"trial {trial}: {codes}"
        assert len(ledger_lines(ledger)) == 1, f"trial {trial}"


async def _due_runs(store: SharedStore, ledger: Path) -> None:
    async with opened(*store.args) as opened_store:
        compiled = slow_charge_graph().compile(opened_store)
        for i in range(RUNS):
            state = {"slow": 4 * WORKER_LEASE, "ledger": str(ledger)}
            await compiled.run(state, thread=f"run-{i}")
        assert len(await Worker([compiled]).due()) == RUNS


async def _until_done(store: SharedStore) -> None:
    """Wait until every run is done (at most :data:`DEADLINE` seconds)."""
    deadline = time.monotonic() + DEADLINE
    async with opened(*store.args) as watcher:
        while time.monotonic() < deadline:
            latest = [await watcher.get(f"run-{i}") for i in range(RUNS)]
            if all(cp is not None and cp.done for cp in latest):
                return
            await asyncio.sleep(LEASE.total_seconds())
    raise AssertionError(f"the workers did not finish the {RUNS} runs in {DEADLINE} s")


@pytest.mark.slow
async def test_three_worker_processes_on_steps_slower_than_their_lease_charge_once(
    store: SharedStore, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    await _due_runs(store, ledger)
    workers = [
        _child(store, "worker", str(DEADLINE), str(WORKER_LEASE), stdin=True)
        for _ in range(WORKERS)
    ]
    _start_together(workers)
    await _until_done(store)  # however slow the machine, every run ends before they stop
    reports = [json.loads(worker.communicate("stop\n", timeout=60)[0]) for worker in workers]
    assert all(worker.returncode == 0 for worker in workers)
    lines = ledger_lines(ledger)
    assert sorted(line.split()[0] for line in lines) == [f"run-{i}" for i in range(RUNS)]
    assert sum(report["resumed"] for report in reports) == RUNS
    assert sum(report["refused"] for report in reports) > 0
