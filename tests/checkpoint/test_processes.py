"""Separate processes racing one store, for every backend that several processes can open.

Four spawned workers live for the whole module (spawning costs far more than
the races) and meet at one barrier handed to them at creation. Each task opens
its own checkpointer from the harness recipe, so the only thing the workers
share is the backend's own storage and locking.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from threading import Barrier
from typing import Any

import pytest

from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint, open_from_recipe
from tests.checkpoint import _child

WORKERS = 4


@dataclass
class Workers:
    """Four live processes and the barrier they meet at."""

    executor: ProcessPoolExecutor
    barrier: Barrier

    async def run(
        self, task: Callable[..., Any], args: Callable[[int], tuple[Any, ...]]
    ) -> list[Any]:
        """``task(*args(i))`` once per worker, all four at once (each waits at the barrier)."""
        self.barrier.reset()  # a failed earlier race must not break this one
        loop = asyncio.get_running_loop()
        calls = (loop.run_in_executor(self.executor, task, *args(i)) for i in range(WORKERS))
        return await asyncio.gather(*calls)


@pytest.fixture(scope="module")
def pool() -> Iterator[Workers]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WORKERS)
    with ProcessPoolExecutor(
        WORKERS, mp_context=ctx, initializer=_child.init_worker, initargs=(barrier,)
    ) as executor:
        yield Workers(executor, barrier)


async def _shared_across_processes(harness: BackendHarness) -> bool:
    """True when children can open this store; otherwise show that they could not.

    An in-process store shipped to a child arrives as a copy, so a race there
    would race nothing: the conformance suite races such stores with tasks.
    """
    if harness.multiprocess:
        return True
    try:
        shipped = pickle.dumps(harness.recipe)
    except (pickle.PicklingError, TypeError, AttributeError):
        return False
    async with harness.open() as cp:
        await cp.put(make_checkpoint("probe", 0))
    async with open_from_recipe(pickle.loads(shipped)) as copy:
        assert await copy.get("probe") is None
    return False


async def test_cas_race_has_one_winner_per_round(harness: BackendHarness, pool: Workers) -> None:
    if not await _shared_across_processes(harness):
        return
    rounds = 10
    async with harness.open() as cp:
        await cp.put(make_checkpoint("race", 0))
    per_worker = await pool.run(_child.cas_race, lambda i: (harness.recipe, i, rounds))
    for index in range(rounds):
        expected = index + 1
        outcomes = sorted(results[index] for results in per_worker)
        assert outcomes == [("lost", expected, expected + 1)] * (WORKERS - 1) + [
            ("won", expected, expected + 1)
        ], f"round {expected}: {outcomes}"
    async with harness.open() as cp:
        final = await cp.get("race", 0)
    assert final is not None and final.revision == rounds + 1
    last_winner = next(i for i, results in enumerate(per_worker) if results[-1][0] == "won")
    assert final.state == {"worker": last_winner, "round": rounds}


async def test_unconditional_puts_never_lose_a_revision(
    harness: BackendHarness, pool: Workers
) -> None:
    if not await _shared_across_processes(harness):
        return
    count = 250
    done = await pool.run(_child.hammer, lambda i: (harness.recipe, i, count))
    assert done == [count] * WORKERS
    async with harness.open() as cp:
        final = await cp.get("hammer", 0)
    assert final is not None and final.revision == WORKERS * count
    assert final.state["i"] == count - 1


async def test_namespaced_writers_never_see_each_other(
    harness: BackendHarness, pool: Workers
) -> None:
    if not await _shared_across_processes(harness):
        return
    steps = 5
    names = [f"tenant-{i}" for i in range(WORKERS)]
    seen = await pool.run(_child.tenant, lambda i: (harness.recipe, names[i], steps))
    for namespace, view in zip(names, seen, strict=True):
        assert view == {
            "threads": sorted(["shared", f"own-{namespace}"]),
            "owners": [namespace],
            "steps": list(range(steps)),
            "revisions": [1],
        }
    async with harness.open() as default:
        assert (await default.list_threads_page()).threads == []
        assert await default.get("shared") is None
