"""Steps stored as their changes: every step reads back whole, and damage raises.

A put whose checkpoint carries :class:`~agentflow.checkpoint.model.StateChanges`
is stored as what the step changed (:mod:`agentflow.checkpoint.deltas`). These
cases hold every backend to the same contract as for full states: ``get`` and
``history`` (both orders, bounded) give each step's exact state, a prune keeps
what the steps it keeps are stored on, a damaged or rewritten record a delta
is stored on raises, and a checkpoint put back as it was read (a copy) is
stored as it was.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from agentflow.checkpoint.base import Checkpoint, Checkpointer, StateChanges
from agentflow.checkpoint.testing.conformance._support import history_of
from agentflow.checkpoint.testing.harness import BackendHarness
from agentflow.errors import CheckpointCorrupted, InvalidArgument

__all__ = ["DeltaConformance", "conversation"]

_STEPS = 70


def _message(step: int) -> dict[str, Any]:
    return {"role": "user" if step % 2 else "assistant", "content": f"turn {step} " * 40}


def conversation(thread: str, steps: int = _STEPS) -> list[Checkpoint]:
    """A thread whose steps append a message, count turns, and now and then set,
    create, replace or remove a key: every kind of change, each as the runtime
    would describe it."""
    checkpoints: list[Checkpoint] = []
    state: dict[str, Any] = {"messages": [], "turn": 0}
    for step in range(steps):
        new = {**state, "messages": [*state["messages"], _message(step)], "turn": step}
        written, removed = ["turn"], []
        appended = {"messages": 1}
        if step % 9 == 4:
            new["notes"] = [f"note {step}"]  # a list set whole, appended to later
            written.append("notes")
        elif step % 9 == 7 and "notes" in new:
            new["notes"] = [*new["notes"], f"more {step}"]
            appended["notes"] = 1
        if step % 13 == 6:
            new["profile"] = {"step": step, "tags": ["a", step]}
            written.append("profile")
        elif step % 17 == 16 and "profile" in new:
            del new["profile"]
            removed.append("profile")
        changes = (
            None
            if step == 0
            else StateChanges(
                new, base=step - 1, written=written, appended=appended, removed=removed
            )
        )
        checkpoints.append(Checkpoint(thread, step, new, next=("turn",), ts="", changes=changes))
        state = new
    return checkpoints


async def _store(cp: Checkpointer, checkpoints: list[Checkpoint]) -> None:
    for checkpoint in checkpoints:
        await cp.put(checkpoint, if_revision=0)


def _states(checkpoints: list[Checkpoint]) -> list[dict[str, Any]]:
    return [dict(c.state) for c in checkpoints]


async def _raising_after(
    cp: Checkpointer, thread: str, steps: list[Checkpoint], damaged: int
) -> list[int]:
    """The steps above ``damaged`` whose read raises (those stored on it), once
    every other one read back as it was put: none reads as another state."""
    raising = []
    for checkpoint in steps[damaged + 1 :]:
        try:
            got = await cp.get(thread, checkpoint.step)
        except CheckpointCorrupted:
            raising.append(checkpoint.step)
            continue
        assert got is not None and got.state == checkpoint.state
    return raising


@pytest.mark.asyncio
class DeltaConformance:
    """What every backend does with steps stored as their changes."""

    async def test_every_step_reads_back_whole(self, harness: BackendHarness) -> None:
        steps = conversation("d")
        expected = _states(steps)
        async with harness.open() as cp:
            await _store(cp, steps)
            for checkpoint in steps:
                got = await cp.get("d", checkpoint.step)
                assert got is not None and got.state == expected[checkpoint.step]
                assert (got.step, got.next, got.revision) == (checkpoint.step, ("turn",), 1)
            latest = await cp.get("d")
            assert latest is not None and latest.state == expected[-1]
            assert [c.state for c in await history_of(cp, "d")] == expected
            newest = [c.state async for c in cp.history("d", newest_first=True)]
            assert newest == expected[::-1]
            middle = [c.state async for c in cp.history("d", after=40, limit=7)]
            assert middle == expected[41:48]
            below = [c.state async for c in cp.history("d", before=40, limit=7, newest_first=True)]
            assert below == expected[33:40][::-1]

    async def test_a_step_is_stored_as_what_it_changed(self, harness: BackendHarness) -> None:
        assert harness.read_payload is not None, "the backend's harness reads no payloads"
        steps = conversation("small")
        async with harness.open() as cp:
            await _store(cp, steps)
        sizes = [len(await harness.read_payload(None, "small", c.step)) for c in steps]
        full = len(orjson.dumps(steps[-1].state))
        assert min(sizes[-16:]) * 5 < full, f"the last steps stored {sizes[-16:]} of {full}"
        assert sum(sizes) < 8 * full, f"{sum(sizes):,} bytes stored for a {full:,}-byte state"

    async def test_prune_keeps_what_kept_steps_are_stored_on(self, harness: BackendHarness) -> None:
        steps = conversation("p")
        expected = _states(steps)
        async with harness.open() as cp:
            await _store(cp, steps)
            assert await cp.prune("p", before_step=50) == 50
            kept = await history_of(cp, "p")
            assert [c.step for c in kept] == list(range(50, _STEPS))
            assert [c.state for c in kept] == expected[50:]
            for step in (50, 61, _STEPS - 1):
                got = await cp.get("p", step)
                assert got is not None and got.state == expected[step]
            await _store(cp, conversation("q"))
            old = "2999-01-01T00:00:00Z"
            assert await cp.prune("q", older_than=old, before_step=_STEPS - 1) == _STEPS - 1
            latest = await history_of(cp, "q")
            assert [(c.step, c.state) for c in latest] == [(_STEPS - 1, expected[-1])]
            assert await cp.get("q") is not None  # the runtime reads the latest, then goes on
            state = {**expected[-1], "turn": "more"}
            changes = StateChanges(state, base=_STEPS - 1, written=["turn"])
            await cp.put(Checkpoint("q", _STEPS, state, changes=changes))
            got = await cp.get("q", _STEPS)
            assert got is not None and got.state == state

    async def test_a_damaged_record_a_step_is_stored_on_raises(
        self, harness: BackendHarness
    ) -> None:
        assert harness.corrupt is not None, "the backend's harness cannot corrupt a record"
        steps = conversation("c", 30)
        async with harness.open() as cp:
            await _store(cp, steps)
            await harness.corrupt(None, "c", 20)
            with pytest.raises(CheckpointCorrupted):
                await cp.get("c", 20)
            with pytest.raises(CheckpointCorrupted):
                await history_of(cp, "c")
            assert await _raising_after(cp, "c", steps, 20)
            got = await cp.get("c", 19)
            assert got is not None and got.state == steps[19].state

    async def test_a_rewritten_base_makes_its_deltas_raise(self, harness: BackendHarness) -> None:
        steps = conversation("r", 30)
        async with harness.open() as cp:
            await _store(cp, steps)
            read = await cp.get("r", 20)
            assert read is not None
            await cp.put(Checkpoint("r", 20, {"other": True}))
            got = await cp.get("r", 20)
            assert got is not None and got.state == {"other": True}
            assert await _raising_after(cp, "r", steps, 20)
            # the state put back as it was read makes every step readable again
            await cp.put(read, if_revision=2)
            again = [await cp.get("r", s) for s in range(18, 30)]
            assert [c.state if c else None for c in again] == [s.state for s in steps[18:30]]

    async def test_a_checkpoint_put_back_as_read_keeps_its_stored_form(
        self, harness: BackendHarness
    ) -> None:
        assert harness.read_payload is not None, "the backend's harness reads no payloads"
        steps = conversation("k")
        async with harness.open() as cp, harness.open(namespace="copy") as copy:
            await _store(cp, steps)
            async for checkpoint in cp.history("k"):
                await copy.put(checkpoint, if_revision=0)
            for step in range(0, _STEPS, 7):  # as rekey does: each step read, put back
                read = await copy.get("k", step)
                assert read is not None
                await copy.put(read, if_revision=read.revision)
            assert [c.state for c in await history_of(copy, "k")] == _states(steps)
            sizes = {
                ns: [len(await harness.read_payload(ns, "k", c.step)) for c in steps]
                for ns in (None, "copy")
            }
        assert sum(sizes["copy"]) <= sum(sizes[None]) * 1.05

    async def test_changes_for_another_state_store_it_whole(self, harness: BackendHarness) -> None:
        steps = conversation("s", 20)
        async with harness.open() as cp:
            await _store(cp, steps[:19])
            last = steps[19]
            edited = dataclasses.replace(last, state={**last.state, "turn": "edited"})
            await cp.put(edited)  # replace() kept the changes; they describe the old state
            got = await cp.get("s", 19)
            assert got is not None and got.state == edited.state
            in_place = dict(last.state)
            changes = StateChanges(in_place, base=18, written=["turn"])
            in_place["extra"] = 1  # changed after its changes were made: stored whole
            await cp.put(Checkpoint("s", 19, in_place, changes=changes))
            got = await cp.get("s", 19)
            assert got is not None and got.state == in_place

    @pytest.mark.parametrize(
        "claims",
        [
            {"base": 5},
            {"base": 3, "written": ["missing"]},
            {"base": 3, "removed": ["turn"]},
            {"base": 3, "appended": {"turn": 1}},
            {"base": 3, "appended": {"messages": 9}},
            {"base": 3, "written": ["turn"], "appended": {"turn": 1}},
        ],
        ids=repr,
    )
    async def test_changes_the_state_contradicts_are_refused(
        self, harness: BackendHarness, claims: dict[str, Any]
    ) -> None:
        steps = conversation("x", 5)
        async with harness.open() as cp:
            await _store(cp, steps[:4])
            state = dict(steps[4].state)
            changes = StateChanges(state, **claims)
            with pytest.raises(InvalidArgument):
                await cp.put(Checkpoint("x", 4, state, changes=changes))
            assert await cp.get("x", 4) is None

    async def test_a_sealed_store_seals_its_deltas(self, harness: BackendHarness) -> None:
        from agentflow.checkpoint.sealing import KeyRing, new_key

        assert harness.read_payload is not None, "the backend's harness reads no payloads"
        ring = KeyRing.from_source(lambda: {"current": "k1", "keys": {"k1": new_key()}})
        steps = conversation("sealed", 40)
        async with harness.open(sealing=ring) as cp:
            await _store(cp, steps)
            assert [c.state for c in await history_of(cp, "sealed")] == _states(steps)
        for step in (1, 20, 39):
            stored = await harness.read_payload(None, "sealed", step)
            assert b"turn " not in stored and b"messages" not in stored
