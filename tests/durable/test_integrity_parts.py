"""The stored form of a run's parts: the integrity envelope, sealing, and what each refuses."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from agentflow.checkpoint.envelope import RunParts
from agentflow.checkpoint.plans import JournalPut, plan_record_operation
from agentflow.checkpoint.rows import RunRow, encode_row
from agentflow.checkpoint.sealing import KeyRing
from agentflow.durable.errors import DurableCorrupted
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.durable.testing.harness import make_record, make_tool_entry
from agentflow.errors import InvalidArgument

SECRET = "s3cr3t-ledger-note"


def _record(key: str = "run-1") -> DurableCheckpoint:
    record = make_record(key, shared_state={"note": SECRET, "amount": 100, "approved": False})
    claimed = replace(record, claim_token="owner#1", claimed_cycle=1, lease_expires_at_ms=10**12)
    entry = make_tool_entry(key, 1, arguments={"amount": 100, "memo": SECRET})
    return plan_record_operation(claimed, entry, "owner#1").record


def _ring(*ids: str, current: str | None = None, retired: tuple[str, ...] = ()) -> KeyRing:
    return KeyRing({i: os.urandom(32) for i in ids}, current=current or ids[0], retired=retired)


def _refused(parts: RunParts, row: RunRow, *words: str) -> str:
    with pytest.raises(DurableCorrupted) as caught:
        parts.decode_row(row)
    message = str(caught.value)
    assert SECRET not in message and "amount" not in message, message
    for word in words:
        assert word in message, message
    return message


def test_every_part_round_trips_checked_and_sealed() -> None:
    record = _record()
    for parts in (RunParts("acme"), RunParts("acme", _ring("k1"))):
        row = parts.encode_row(record)
        assert len(row.tool_journal) == 1
        assert parts.decode_row(row) == record


def test_every_bit_flip_of_a_checked_body_or_entry_is_refused() -> None:
    parts = RunParts("acme")
    row = parts.encode_row(_record())
    for name in ("body", "entry"):
        stored = row.body if name == "body" else row.tool_journal[0]
        for bit in range(len(stored) * 8):
            damaged = bytearray(stored)
            damaged[bit // 8] ^= 1 << (bit % 8)
            changed = (
                replace(row, body=bytes(damaged))
                if name == "body"
                else replace(row, tool_journal=(bytes(damaged),))
            )
            with pytest.raises(DurableCorrupted):
                parts.decode_row(changed)


def test_an_edited_value_inside_a_string_is_refused() -> None:
    # Canonical JSON alone would decode this as other data.
    parts = RunParts("acme")
    row = parts.encode_row(_record())
    assert row.body.count(b"s3cr3t") == 1
    _refused(parts, replace(row, body=row.body.replace(b"s3cr3t", b"s3cr4t")), "body", "integrity")
    entry = row.tool_journal[0].replace(b'"amount":100', b'"amount":900', 1)
    _refused(parts, replace(row, tool_journal=(entry,)), "tool.0", "'run-1'")


def test_a_part_moved_to_another_run_place_or_namespace_is_refused() -> None:
    acme, globex = RunParts("acme"), RunParts("globex")
    for parts in (acme, RunParts("acme", _ring("k1"))):
        one, two = parts.encode_row(_record("run-1")), parts.encode_row(_record("run-2"))
        _refused(parts, replace(two, body=one.body), "body")
        _refused(parts, replace(two, tool_journal=one.tool_journal), "tool.0")
        # An entry at another index of its own journal, and in the other journal.
        _refused(parts, replace(one, tool_journal=(one.tool_journal[0],) * 2), "tool.1")
        _refused(parts, replace(one, model_journal=one.tool_journal, tool_journal=()), "model.0")
    _refused(globex, acme.encode_row(_record()), "body")


def test_parts_written_before_the_envelope_still_read_unless_sealing_is_on() -> None:
    record = _record()
    legacy = encode_row(record)
    assert RunParts("acme").decode_row(legacy) == record
    _refused(RunParts("acme", _ring("k1")), legacy, "not sealed")


def test_sealed_parts_hold_no_plaintext_and_need_a_key() -> None:
    ring = _ring("k1")
    row = RunParts("acme", ring).encode_row(_record())
    for stored in (row.body, *row.tool_journal):
        assert SECRET.encode() not in stored and b"amount" not in stored
        assert stored.startswith(b'[2,"')
    _refused(RunParts("acme"), row, "sealed", "no key ring")
    _refused(RunParts("acme", _ring("k2")), row, "'k1'", "does not hold")
    _refused(RunParts("acme", _ring("k1")), row, "does not open")  # same id, other key bytes
    with pytest.raises(InvalidArgument):
        RunParts("acme", "not a key ring")  # type: ignore[arg-type]


def test_a_retired_key_still_opens_and_the_next_write_reseals_with_the_current_one() -> None:
    keys = {"old": os.urandom(32), "new": os.urandom(32)}
    record = _record()
    row = RunParts("acme", KeyRing({"old": keys["old"]}, current="old")).encode_row(record)
    rotated = KeyRing(keys, current="new", retired=("old",))
    parts = RunParts("acme", rotated)
    assert parts.decode_row(row) == record
    entry = make_tool_entry("run-1", 1, position=2)
    write = parts.write(plan_record_operation(record, entry, "owner#1"))
    assert isinstance(write.journal, tuple)
    (put,) = write.journal
    assert isinstance(put, JournalPut) and put.entry.startswith(b'[2,"')
    assert write.body is None  # a journal write leaves the body (and its key) as stored
    assert parts.open("run-1", "tool.1", put.entry) == encode_row(write.record).tool_journal[1]


def test_event_payloads_are_sealed_only_with_sealing() -> None:
    data = b'{"note":"' + SECRET.encode() + b'"}'
    ring = _ring("k1")
    plain, sealed = RunParts("acme"), RunParts("acme", ring)
    assert plain.seal_event("ev-1", data) == data
    stored = sealed.seal_event("ev-1", data)
    assert SECRET.encode() not in stored
    assert sealed.open_event("ev-1", stored) == data
    with pytest.raises(DurableCorrupted):
        sealed.open_event("ev-2", stored)
    with pytest.raises(DurableCorrupted):
        sealed.open_event("ev-1", data)
    with pytest.raises(DurableCorrupted, match="no key ring") as caught:
        plain.open_event("ev-1", stored)
    assert caught.value.code == "checkpoint_sealing_invalid"
    with pytest.raises(DurableCorrupted):
        RunParts("globex", ring).open_event("ev-1", stored)
