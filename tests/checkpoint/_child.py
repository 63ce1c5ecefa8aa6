"""Entry points that run in child processes for the race and crash suites.

Each opens its own checkpointer from a :attr:`BackendHarness.recipe`, so the
children share the store only through the backend itself, as separate
deployments of one application would. Results come back as plain tuples and
dicts; the parent does the asserting.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
from threading import Barrier
from typing import Any

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.testing.harness import make_checkpoint, open_from_recipe
from agentflow.errors import CheckpointConflict

Recipe = tuple[str, dict[str, Any]]

#: How long a child waits for its peers before giving up (a hung peer fails the test).
BARRIER_TIMEOUT = 120.0
CRASH_THREADS = 4
CRASH_STEPS = 8
#: Crash states range from a few bytes to about this many bytes of text.
CRASH_MAX_BYTES = 1 << 20

#: This worker's barrier, set once by :func:`init_worker`.
_shared: dict[str, Barrier] = {}


def init_worker(barrier: Barrier) -> None:
    """Pool initializer: a barrier can reach a child only when the child is created."""
    _shared["barrier"] = barrier


async def _rendezvous() -> None:
    await asyncio.to_thread(_shared["barrier"].wait, BARRIER_TIMEOUT)


def cas_race(recipe: Recipe, worker: int, rounds: int) -> list[tuple[str, int, int]]:
    """Per round, after every worker arrives: put(if_revision=round + 1) on one step."""

    async def run() -> list[tuple[str, int, int]]:
        outcomes: list[tuple[str, int, int]] = []
        async with open_from_recipe(recipe) as cp:
            for expected in range(1, rounds + 1):
                await _rendezvous()
                state = {"worker": worker, "round": expected}
                try:
                    await cp.put(make_checkpoint("race", 0, state=state), if_revision=expected)
                    outcomes.append(("won", expected, expected + 1))
                except CheckpointConflict as exc:
                    outcomes.append(("lost", exc.expected, exc.actual))
        return outcomes

    return asyncio.run(run())


def hammer(recipe: Recipe, worker: int, count: int) -> int:
    """``count`` unconditional puts on one step, all workers starting together."""

    async def run() -> int:
        async with open_from_recipe(recipe) as cp:
            await _rendezvous()
            for i in range(count):
                await cp.put(make_checkpoint("hammer", 0, state={"worker": worker, "i": i}))
        return count

    return asyncio.run(run())


def tenant(recipe: Recipe, namespace: str, steps: int) -> dict[str, Any]:
    """Write the same thread names as every other tenant, then report what is visible."""

    async def run() -> dict[str, Any]:
        async with open_from_recipe(recipe, namespace=namespace) as cp:
            await _rendezvous()
            for step in range(steps):
                for thread in ("shared", f"own-{namespace}"):
                    await cp.put(make_checkpoint(thread, step, state={"owner": namespace}))
            await _rendezvous()
            history = [c async for c in cp.history("shared")]
            page = await cp.list_threads_page(limit=100)
            return {
                "threads": [i.thread for i in page.threads],
                "owners": sorted({c.state["owner"] for c in history}),
                "steps": [c.step for c in history],
                "revisions": sorted({c.revision for c in history}),
            }

    return asyncio.run(run())


def sealed_state(thread: str, step: int, size: int) -> dict[str, Any]:
    """A state carrying a digest of its own content and of where it belongs."""
    blob = os.urandom(max(size // 2, 1)).hex()
    return {"blob": blob, "sha256": _digest(thread, step, blob)}


def is_sealed(cp: Checkpoint) -> bool:
    """True when ``cp.state`` is exactly what :func:`sealed_state` made for its place."""
    state = cp.state
    return set(state) == {"blob", "sha256"} and state["sha256"] == _digest(
        cp.thread, cp.step, state["blob"]
    )


def _digest(thread: str, step: int, blob: str) -> str:
    return hashlib.sha256(f"{thread}\x00{step}\x00{blob}".encode()).hexdigest()


def crash_writer(recipe: Recipe, seed: int, ready: Any) -> None:
    """Write forever (until SIGKILLed): mixed sizes, CAS and unconditional puts."""

    async def run() -> None:
        rng = random.Random(seed)
        async with open_from_recipe(recipe) as cp:
            ready.set()
            while True:
                thread = f"crash-{rng.randrange(CRASH_THREADS)}"
                step = rng.randrange(CRASH_STEPS)
                size = int(2 ** rng.uniform(4, CRASH_MAX_BYTES.bit_length() - 1))
                new = Checkpoint(thread=thread, step=step, state=sealed_state(thread, step, size))
                if rng.random() < 0.5:
                    current = await cp.get(thread, step)
                    await cp.put(new, if_revision=current.revision if current else 0)
                else:
                    await cp.put(new)

    asyncio.run(run())
