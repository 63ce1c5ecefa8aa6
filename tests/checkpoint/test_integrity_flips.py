"""Damage made directly in each store is detected on read, never returned as data.

Random single-bit flips and targeted edits of what a backend keeps, written
with the harness's raw payload hooks. Every one is detected; the one allowed
exception is a flip outside the checked record (in framing a store keeps
around it) that reads back as exactly the same checkpoint, and each such case
is proven here by comparing the whole checkpoint.

``AGENTFLOW_INTEGRITY_FLIPS`` sets the number of flips per backend (1,000 by
default); ``AGENTFLOW_INTEGRITY_SEED`` picks other positions.
"""

from __future__ import annotations

import dataclasses
import os
import random
from typing import Any

import pytest

from agentflow.checkpoint import Checkpoint, Checkpointer, JsonCodec, RecordKey
from agentflow.checkpoint.envelope import wrap
from agentflow.checkpoint.testing import BackendHarness, PayloadReader, PayloadWriter
from agentflow.errors import CheckpointCorrupted

FLIPS = int(os.environ.get("AGENTFLOW_INTEGRITY_FLIPS", "1000"))
SEED = int(os.environ.get("AGENTFLOW_INTEGRITY_SEED", "20261201"))
_MARKER = "s3cr3t-marker"


def _checkpoint(thread: str, step: int) -> Checkpoint:
    state: dict[str, Any] = {
        "amount": 100,
        "approved": False,
        "to": "alice",
        "note": _MARKER,
        "messages": [{"role": "user", "content": f"message {i} " * 6} for i in range(30)],
    }
    return Checkpoint(
        thread=thread, step=step, state=state, next=("pay",), ts="2026-12-01T10:00:00+00:00"
    )


def _hooks(harness: BackendHarness) -> tuple[PayloadReader, PayloadWriter]:
    assert harness.read_payload is not None and harness.write_payload is not None, (
        f"the {harness.name} harness must offer read_payload and write_payload"
    )
    return harness.read_payload, harness.write_payload


async def _refused(cp: Checkpointer, thread: str, step: int) -> CheckpointCorrupted:
    with pytest.raises(CheckpointCorrupted) as caught:
        await cp.get(thread, step)
    message = str(caught.value)
    assert f"thread {thread!r}" in message, message
    assert _MARKER not in message and "alice" not in message, message
    return caught.value


def _record_span(raw: bytes, namespace: str, cp: Checkpoint) -> range:
    """Where the checked record lies in what the store keeps."""
    key = RecordKey(namespace, cp.thread, cp.step)
    record = wrap(key, JsonCodec().encode(cp, key))
    start = raw.find(record)
    assert start >= 0, "the stored bytes do not hold the record the base wrote"
    return range(start, start + len(record))


async def test_random_bit_flips_are_detected(harness: BackendHarness) -> None:
    read, write = _hooks(harness)
    original = _checkpoint("flips", 4)
    async with harness.open(namespace="acme") as cp:
        await cp.put(original)
        expected = await cp.get("flips", 4)
        assert expected is not None
        raw = await read("acme", "flips", 4)
        span = _record_span(raw, "acme", original)
        rng = random.Random(SEED)
        identical: list[int] = []
        for flip in range(FLIPS):
            bit = rng.randrange(len(raw) * 8)
            damaged = bytearray(raw)
            damaged[bit // 8] ^= 1 << (bit % 8)
            await write("acme", "flips", 4, bytes(damaged))
            try:
                got = await cp.get("flips", 4)
            except CheckpointCorrupted as exc:
                assert _MARKER not in str(exc)
                if flip % 50 == 0:
                    with pytest.raises(CheckpointCorrupted):
                        [c async for c in cp.history("flips")]
                continue
            assert bit // 8 not in span, f"seed {SEED}: flip of bit {bit} inside the record read"
            assert got == expected, f"seed {SEED}: flip of bit {bit} read back as other data"
            identical.append(bit)
        await write("acme", "flips", 4, raw)
        assert await cp.get("flips", 4) == expected
    # Every flip inside the record was detected; those outside it, if any, read identical.
    assert all(bit // 8 not in span for bit in identical)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b'"amount":100', b'"amount":900'),
        (b'"approved":false', b'"approved":true'),
        (b'"to":"alice"', b'"to":"mallo"'),
        (b'"next":["pay"]', b'"next":["end"]'),
    ],
    ids=["amount", "approved", "recipient", "next"],
)
async def test_targeted_edits_are_detected(harness: BackendHarness, old: bytes, new: bytes) -> None:
    read, write = _hooks(harness)
    async with harness.open() as cp:
        await cp.put(_checkpoint("edits", 0))
        raw = await read(None, "edits", 0)
        assert raw.count(old) == 1
        await write(None, "edits", 0, raw.replace(old, new))
        await _refused(cp, "edits", 0)


async def test_cut_padded_and_emptied_records_are_detected(harness: BackendHarness) -> None:
    read, write = _hooks(harness)
    async with harness.open() as cp:
        await cp.put(_checkpoint("cut", 0))
        raw = await read(None, "cut", 0)
        for damaged in (raw[:-1], raw[: len(raw) // 2], raw + b" ", b""):
            await write(None, "cut", 0, damaged)
            await _refused(cp, "cut", 0)


async def test_a_record_copied_to_another_step_thread_or_tenant_is_detected(
    harness: BackendHarness,
) -> None:
    read, write = _hooks(harness)
    async with harness.open(namespace="acme") as acme, harness.open(namespace="globex") as globex:
        for cp in (acme, globex):
            for thread, step in (("a", 0), ("a", 1), ("b", 0)):
                await cp.put(_checkpoint(thread, step))
        # Step 1 of thread a, copied over step 0; thread a's step 0 over thread b's;
        # acme's record over globex's identical-looking one.
        await write("acme", "a", 0, await read("acme", "a", 1))
        await write("acme", "b", 0, await read("acme", "a", 0))
        await write("globex", "a", 1, await read("acme", "a", 1))
        for cp, thread, step in ((acme, "a", 0), (acme, "b", 0), (globex, "a", 1)):
            await _refused(cp, thread, step)
        intact = await globex.get("b", 0)
        assert intact is not None
        assert intact == dataclasses.replace(_checkpoint("b", 0), revision=1)
