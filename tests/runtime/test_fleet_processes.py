"""max_concurrent across worker processes: never more runs of the graph at once than it says.

Four worker processes (16 slots between them) wake 20 due runs of a graph
compiled with ``max_concurrent=5`` on a shared store; each run writes ``in``
and ``out`` lines to a ledger around a hold, so the ledger says how many were
inside their node at any moment, and the store's claims bound that from above.
The file backend is left out: it decides a limit within one process only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from tests.runtime.fleet_child import counted_graph
from tests.runtime.graphs import ledger_lines
from tests.runtime.shared_stores import SharedStore, opened, shared_store

ROOT = Path(__file__).resolve().parents[2]
LIMITED_BACKENDS = ("sqlite", "postgres", "redis", "mongodb")
pytestmark = pytest.mark.backends(*LIMITED_BACKENDS)
RUNS, WORKERS, LIMIT = 20, 4, 5


@pytest.fixture(params=[name for name in LIMITED_BACKENDS if name in BACKENDS])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SharedStore]:
    async with shared_store(request.param, tmp_path) as shared:
        yield shared


def _worker(store: SharedStore) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.fleet_child", *store.args, str(LIMIT)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _peak(lines: list[str]) -> int:
    inside = peak = 0
    for line in lines:
        inside += 1 if line.startswith("in ") else -1
        peak = max(peak, inside)
    return peak


@pytest.mark.slow
async def test_a_limit_of_five_is_never_exceeded_across_four_worker_processes(
    store: SharedStore, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    async with opened(*store.args) as opened_store:
        graph = counted_graph().compile(opened_store)
        for index in range(RUNS):
            await graph.run({"ledger": str(ledger)}, thread=f"run-{index:02}")
    workers = [_worker(store) for _ in range(WORKERS)]
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
    reports = [json.loads(worker.communicate("go\n", timeout=120)[0]) for worker in workers]
    assert all(worker.returncode == 0 for worker in workers)
    lines = ledger_lines(ledger)
    assert sorted(line.split()[1] for line in lines if line.startswith("in ")) == [
        f"run-{index:02}" for index in range(RUNS)
    ]
    assert sum(report["resumed"] for report in reports) == RUNS
    assert 2 <= _peak(lines) <= LIMIT, lines
