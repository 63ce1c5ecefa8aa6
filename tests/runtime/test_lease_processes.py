"""Leases between real processes on SQLite: no run is run twice, none is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.durable.stores.sqlite import SqliteDurableStore
from tests.runtime.graphs import ledger_lines, slow_charge_graph
from tests.runtime.lease_child import CLAIMED, ENDED, LEASE

ROOT = Path(__file__).resolve().parents[2]
TRIALS = 5
RUNS = 4
WORKERS = 3


def _child(*args: str, stdin: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.lease_child", *args],
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
def test_two_processes_resuming_a_run_that_died_between_steps_run_it_once(
    tmp_path: Path,
) -> None:
    for trial in range(TRIALS):
        db, ledger = tmp_path / f"t{trial}.db", tmp_path / f"ledger{trial}"
        died = _child("run", str(db), "run", str(ledger))
        assert died.wait(timeout=30) == -9  # SIGKILL, in the step after a stored one
        resumers = [_child("resume", str(db), "run", stdin=True) for _ in range(2)]
        time.sleep(2 * LEASE.total_seconds())  # the dead holder's lease lapses
        _start_together(resumers)
        codes = sorted(resumer.wait(timeout=30) for resumer in resumers)
        assert codes in ([0, CLAIMED], [0, ENDED]), f"trial {trial}: {codes}"
        assert len(ledger_lines(ledger)) == 1, f"trial {trial}"


async def _due_runs(db: Path, ledger: Path) -> None:
    async with SqliteCheckpointer(db) as store, SqliteDurableStore(db) as durable:
        compiled = slow_charge_graph().compile(store, durable=durable)
        for i in range(RUNS):
            state = {"slow": 8 * LEASE.total_seconds(), "ledger": str(ledger)}
            await compiled.run(state, thread=f"run-{i}")


@pytest.mark.slow
async def test_three_worker_processes_on_steps_slower_than_their_lease_charge_once(
    tmp_path: Path,
) -> None:
    db, ledger = tmp_path / "runs.db", tmp_path / "ledger"
    await _due_runs(db, ledger)
    seconds = str(12 * LEASE.total_seconds())  # each worker outlives a step
    workers = [_child("worker", str(db), seconds, stdin=True) for _ in range(WORKERS)]
    _start_together(workers)
    reports = [json.loads(worker.communicate(timeout=60)[0]) for worker in workers]
    assert all(worker.returncode == 0 for worker in workers)
    lines = ledger_lines(ledger)
    assert sorted(line.split()[0] for line in lines) == [f"run-{i}" for i in range(RUNS)]
    assert sum(report["resumed"] for report in reports) == RUNS
    assert sum(report["refused"] for report in reports) > 0
