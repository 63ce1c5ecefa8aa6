"""Damage to a record a step is stored on (its delta, the deltas below it, the full
state they start from) is detected when the step is read, never returned as data.

Random single-bit flips of what each backend keeps, written with the harness's
raw payload hooks and put back after each read. A flip in framing a store keeps
around the checked record may read back as exactly the same state: that is
allowed, and compared whole. ``AGENTFLOW_DELTA_FLIPS`` sets the flips per
record (60 by default, so every backend's run stays short)."""

from __future__ import annotations

import os
import random

import pytest

from agentflow.checkpoint.testing import BackendHarness
from agentflow.checkpoint.testing.conformance.deltas import conversation
from agentflow.errors import CheckpointCorrupted

FLIPS = int(os.environ.get("AGENTFLOW_DELTA_FLIPS", "60"))
SEED = int(os.environ.get("AGENTFLOW_INTEGRITY_SEED", "20261201"))


@pytest.mark.parametrize("damaged", [17, 20, 24], ids=["full state", "delta below", "the step"])
async def test_a_flipped_bit_in_a_chain_is_detected(harness: BackendHarness, damaged: int) -> None:
    read, write = harness.read_payload, harness.write_payload
    assert read is not None and write is not None, f"the {harness.name} harness lacks them"
    steps = conversation("flips", 25)
    async with harness.open() as cp:
        for checkpoint in steps:
            await cp.put(checkpoint, if_revision=0)
        stored = await cp.get("flips", 24)  # stored on 17 (its full state) through 23
        assert stored is not None and stored.changes is not None and stored.changes.base == 23
        expected = steps[24].state
        original = await read(None, "flips", damaged)
        rng = random.Random(SEED + damaged)
        identical = 0
        for _ in range(FLIPS):
            position = rng.randrange(len(original) * 8)
            flipped = bytearray(original)
            flipped[position // 8] ^= 1 << position % 8
            await write(None, "flips", damaged, bytes(flipped))
            try:
                got = await cp.get("flips", 24)
            except CheckpointCorrupted:
                pass
            else:
                assert got is not None and got.state == expected, f"bit {position} read as data"
                identical += 1
            await write(None, "flips", damaged, original)
        got = await cp.get("flips", 24)
        assert got is not None and got.state == expected
    assert identical < FLIPS / 4, f"{identical} of {FLIPS} flips went unseen"
