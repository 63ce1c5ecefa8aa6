"""Delta chains on their own: random changes read back exactly, bounded chains,
damage refused, and the store's memory of links.

The conformance suite (DeltaConformance) holds every backend to the contract;
these cases go deeper on the memory store, whose records they can read."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from agentflow.checkpoint import Checkpoint, JsonCodec, MemoryCheckpointer, RecordKey, RedactKeys
from agentflow.checkpoint.base import StateChanges
from agentflow.checkpoint.deltas import (
    MAX_SEGMENTS,
    MAX_SPAN,
    SEGMENT_STEPS,
    ChainLinks,
    ChainRecord,
    full_link,
    read_chained,
    replayed,
)
from agentflow.checkpoint.envelope import unwrap_record
from agentflow.errors import CheckpointCorrupted


def _step(rng: random.Random, state: dict[str, Any], step: int) -> tuple[dict[str, Any], Any]:
    """One random step: appends, sets, removals and re-creations of keys."""
    new = dict(state)
    written: list[str] = []
    appended: dict[str, int] = {}
    removed: list[str] = []
    for key in ("a", "b", "c", "d"):
        roll = rng.random()
        if roll < 0.35 and (key not in new or type(new[key]) is list):
            count = rng.randrange(0, 3)
            new[key] = [*new.get(key, []), *(f"{key}{step}.{i}" for i in range(count))]
            appended[key] = count
        elif roll < 0.55:
            new[key] = rng.choice([step, [step], {"n": step}, None, "x" * rng.randrange(9)])
            written.append(key)
        elif roll < 0.62 and key in new:
            del new[key]
            removed.append(key)
    return new, StateChanges(
        new, base=step - 1, written=written, appended=appended, removed=removed
    )


@pytest.mark.parametrize("seed", range(6))
async def test_random_changes_read_back_exactly(seed: int) -> None:
    rng = random.Random(seed)
    cp = MemoryCheckpointer()
    states: list[dict[str, Any]] = [{"a": []}]
    await cp.put(Checkpoint("t", 0, states[0]))
    for step in range(1, 400):
        state, changes = _step(rng, states[-1], step)
        await cp.put(Checkpoint("t", step, state, changes=changes), if_revision=0)
        states.append(state)
    for step in rng.sample(range(400), 60):
        got = await cp.get("t", step)
        assert got is not None and got.state == states[step], step
    assert [c.state async for c in cp.history("t")] == states
    assert [c.state async for c in cp.history("t", newest_first=True)] == states[::-1]
    fresh = MemoryCheckpointer(store=cp._store)  # no links remembered: reads every chain
    assert [c.state async for c in fresh.history("t", after=123, limit=50)] == states[124:174]


def _records(cp: MemoryCheckpointer, thread: str) -> dict[int, ChainRecord | None]:
    """Each stored step of ``thread`` as its chained record (None: stored plain)."""
    found: dict[int, ChainRecord | None] = {}
    for step, stored in cp._data.threads[thread].items():
        key = RecordKey("", thread, step)
        body, chained = unwrap_record(key, stored.encoded.payload)
        decoded = JsonCodec().decode(body, key, stored.revision)
        found[step] = read_chained(decoded, len(stored.encoded.payload)) if chained else None
    return found


async def test_chains_stay_bounded_however_long_the_thread() -> None:
    cp = MemoryCheckpointer()
    state: dict[str, Any] = {"log": []}
    await cp.put(Checkpoint("long", 0, state))
    for step in range(1, 3_000):
        state = {"log": [*state["log"], step]}
        changes = StateChanges(state, base=step - 1, appended={"log": 1})
        await cp.put(Checkpoint("long", step, state, changes=changes))
    records = _records(cp, "long")
    chains = [r for r in records.values() if r is not None and r.chain]
    assert max(len(r.chain) for r in chains) <= MAX_SEGMENTS + SEGMENT_STEPS
    assert max(r.step - r.anchor for r in chains) <= MAX_SPAN
    fulls = [step for step, r in records.items() if r is not None and not r.chain]
    assert 1 < len(fulls) < 3_000 // SEGMENT_STEPS
    got = await cp.get("long")
    assert got is not None and got.state == state


async def test_a_store_with_a_redactor_stores_every_state_whole() -> None:
    """A redacted value need not be what a delta of the redacted state holds."""
    redacting = MemoryCheckpointer(redact=RedactKeys(["secret"]))
    state = {"log": ["a"], "secret": "s"}
    await redacting.put(Checkpoint("r", 0, state))
    nxt = {"log": ["a", "b"], "secret": "s"}
    await redacting.put(
        Checkpoint("r", 1, nxt, changes=StateChanges(nxt, base=0, appended={"log": 1}))
    )
    assert all(r is None for r in _records(redacting, "r").values())
    got = await redacting.get("r", 1)
    assert got is not None and got.state == {"log": ["a", "b"], "secret": "***REDACTED***"}


async def test_a_read_checkpoint_carries_its_changes_and_a_replaced_state_drops_them() -> None:
    cp = MemoryCheckpointer()
    await cp.put(Checkpoint("t", 0, {"log": []}))
    for step in range(1, 5):
        state = {"log": list(range(step))}
        await cp.put(
            Checkpoint(
                "t", step, state, changes=StateChanges(state, base=step - 1, appended={"log": 1})
            )
        )
    got = await cp.get("t", 3)
    assert got is not None and got.changes is not None
    assert (got.changes.base, dict(got.changes.appended), got.changes.token) != (None, {}, None)
    changes = got.changes
    assert changes.describes(got.state)
    replaced = dataclasses.replace(got, state=dict(got.state))
    assert replaced.changes is changes and not changes.describes(replaced.state)
    got.state["log"].append(99)
    assert not changes.describes(got.state)


def _record(step: int, doc: dict[str, Any]) -> Checkpoint:
    return Checkpoint("t", step, doc)


@pytest.mark.parametrize(
    "doc",
    [
        {"full": {}},
        {"t": -1, "full": {}},
        {"t": True, "full": {}},
        {"t": 1, "full": []},
        {"t": 1, "full": {}, "x": 0},
        {"t": 1, "bt": 2},
        {"t": 1, "bt": 2, "c": []},
        {"t": 1, "bt": 2, "c": [3, 3]},
        {"t": 1, "bt": 2, "c": [4, 2]},
        {"t": 1, "bt": 2, "c": [9]},
        {"t": 1, "bt": "2", "c": [1]},
        {"t": 1, "bt": 2, "c": [1.0]},
    ],
    ids=repr,
)
def test_a_malformed_chain_document_is_corrupted(doc: dict[str, Any]) -> None:
    with pytest.raises(CheckpointCorrupted):
        read_chained(_record(9, doc), 10)


@pytest.mark.parametrize(
    "delta",
    [
        {"del": ["missing"]},
        {"add": {"log": [5, ["x"]]}},
        {"add": {"n": [0, ["x"]]}},
        {"add": {"log": [1, "x"]}},
        {"add": {"log": "x"}},
        {"set": []},
    ],
    ids=repr,
)
def test_a_delta_that_does_not_fit_its_base_is_corrupted(delta: dict[str, Any]) -> None:
    base = read_chained(_record(1, {"t": 7, "full": {"log": ["a"], "n": 3}}), 10)
    record = read_chained(_record(2, {"t": 8, "bt": 7, "c": [1], **delta}), 10)
    with pytest.raises(CheckpointCorrupted):
        replayed({"log": ["a"], "n": 3}, record, base, in_place=False)
    other = read_chained(_record(2, {"t": 8, "bt": 6, "c": [1]}), 10)
    with pytest.raises(CheckpointCorrupted):
        replayed({"log": ["a"], "n": 3}, other, base, in_place=False)


def test_links_are_kept_for_the_steps_last_used_and_found_by_segment() -> None:
    links = ChainLinks()
    for step in range(10):
        links.put("t", step, full_link(step, step, 100, {"log": []}))
    assert links.get("t", 5) is None and links.get("t", 9) is not None
    assert links.get("t", 6) is not None  # used now: kept over 7
    links.put("t", 10, full_link(10, 10, 100, {}))
    assert links.get("t", 6) is not None and links.get("t", 7) is None
    links.put("t", 10, None)
    assert links.get("t", 10) is None
    links.forget("t")
    assert links.get("t", 9) is None
