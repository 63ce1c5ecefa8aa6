"""The codec: what is accepted, what is refused, and corrupted input."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentflow.checkpoint import Checkpoint, MemoryCheckpointer, envelope
from agentflow.checkpoint.backend import EncodedCheckpoint
from agentflow.checkpoint.codec import PAYLOAD_VERSION, JsonCodec, RecordKey
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import CheckpointCorrupted, CheckpointNotSerializable, InvalidArgument

_KEY = RecordKey("", "t", 0)


def encode(cp: Checkpoint) -> EncodedCheckpoint:
    """What a backend stores for ``cp``: the base's checks, then the JSON codec
    (taken out of the integrity envelope the base wraps it in)."""
    encoded = MemoryCheckpointer()._encode(cp)
    key = RecordKey("", encoded.thread, encoded.step)
    return dataclasses.replace(encoded, payload=envelope.unwrap(key, encoded.payload))


def decode(blob: bytes, revision: int) -> Checkpoint:
    return JsonCodec().decode(blob, _KEY, revision)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(state=st.dictionaries(st.text(), json_values, max_size=6), payload=json_values)
def test_any_json_round_trips(state: dict[str, object], payload: object) -> None:
    cp = Checkpoint(
        thread="t", step=1, state=state, interrupt_payload=payload, ts="2026-01-01T00:00:00Z"
    )
    encoded = encode(cp)
    got = decode(encoded.payload, 4)
    assert got.state == state and got.interrupt_payload == payload and got.revision == 4


def test_tuple_state_values_come_back_as_lists() -> None:
    encoded = encode(Checkpoint(thread="t", step=0, state={"pair": (1, 2)}))
    assert decode(encoded.payload, 1).state == {"pair": [1, 2]}


def test_nan_refused_but_plain_nulls_are_fine() -> None:
    ok = encode(Checkpoint(thread="t", step=0, state={"x": None, "s": "null"}))
    assert decode(ok.payload, 1).state == {"x": None, "s": "null"}
    with pytest.raises(CheckpointNotSerializable, match="NaN or infinity"):
        encode(Checkpoint(thread="t", step=0, state={"x": None, "y": [float("-inf")]}))


def test_encoded_columns_reflect_the_checkpoint() -> None:
    cp = Checkpoint(
        thread="t",
        step=3,
        state={},
        next=("a",),
        interrupted=True,
        wake_at="2026-01-01T00:00:00+00:00",
        ts="2026-01-01T02:00:00+02:00",
    )
    encoded = encode(cp)
    assert (encoded.thread, encoded.step, encoded.interrupted, encoded.done) == (
        "t",
        3,
        True,
        False,
    )
    assert encoded.ts_us == parse_instant("2026-01-01T00:00:00Z") == 1_767_225_600_000_000
    assert encoded.wake_us == encoded.ts_us and encoded.status == "waiting"


def test_naive_timestamps_are_utc() -> None:
    assert parse_instant("2026-01-01T00:00:00") == parse_instant("2026-01-01T00:00:00+00:00")
    assert parse_instant("2026-01-01T01:00:00+01:00") == parse_instant("2026-01-01T00:00:00Z")
    with pytest.raises(InvalidArgument):
        parse_instant("31/12/2026")


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        b"\xff\xfe",
        b"[1, 2]",
        b"{}",
        orjson.dumps({"v": PAYLOAD_VERSION + 1}),
        orjson.dumps({"v": PAYLOAD_VERSION, "thread": "t"}),
        orjson.dumps(
            {
                "v": PAYLOAD_VERSION,
                "thread": "t",
                "step": 0,
                "state": [],
                "next": [],
                "parent": None,
                "ts": "",
                "interrupted": False,
                "interrupt_node": None,
                "interrupt_payload": None,
                "wake_at": None,
                "extra": {},
            }
        ),
    ],
    ids=[
        "empty",
        "not-utf8",
        "array",
        "no-version",
        "future-version",
        "truncated",
        "state-not-object",
    ],
)
def test_corrupted_payloads_raise_never_none(blob: bytes) -> None:
    with pytest.raises(CheckpointCorrupted) as info:
        decode(blob, 1)
    assert info.value.code == "checkpoint_corrupted" and info.value.__cause__ is not None


def _payload(**changes: object) -> bytes:
    fields: dict[str, object] = {
        "v": PAYLOAD_VERSION,
        "thread": "t",
        "step": 0,
        "state": {},
        "next": [],
        "parent": None,
        "ts": "",
        "interrupted": False,
        "interrupt_node": None,
        "interrupt_payload": None,
        "wake_at": None,
        "extra": {},
    }
    return orjson.dumps({**fields, **changes})


@pytest.mark.parametrize(
    "changes",
    [
        {"next": "approve"},
        {"next": ["a", 1]},
        {"interrupted": "no"},
        {"interrupted": 0},
        {"step": True},
        {"step": "0"},
        {"thread": 7},
        {"parent": 5},
        {"wake_at": 1},
        {"extra": []},
        {"ts": None},
    ],
    ids=repr,
)
def test_a_field_of_the_wrong_type_is_corruption(changes: dict[str, object]) -> None:
    assert decode(_payload(), 1).step == 0
    with pytest.raises(CheckpointCorrupted) as info:
        decode(_payload(**changes), 1)
    assert "'t'" in str(info.value) and "0" in str(info.value)
