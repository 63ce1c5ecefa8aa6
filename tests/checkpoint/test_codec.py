"""The codec: what is accepted, what is refused, and corrupted input."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentflow.checkpoint import Checkpoint
from agentflow.checkpoint.codec import PAYLOAD_VERSION, decode, encode, parse_instant
from agentflow.checkpoint.redaction import redact_none
from agentflow.errors import CheckpointCorrupted, CheckpointNotSerializable, InvalidArgument

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
    encoded = encode(cp, redact_none)
    got = decode(encoded.payload, 4)
    assert got.state == state and got.interrupt_payload == payload and got.revision == 4


def test_tuple_state_values_come_back_as_lists() -> None:
    encoded = encode(Checkpoint(thread="t", step=0, state={"pair": (1, 2)}), redact_none)
    assert decode(encoded.payload, 1).state == {"pair": [1, 2]}


def test_nan_refused_but_plain_nulls_are_fine() -> None:
    ok = encode(Checkpoint(thread="t", step=0, state={"x": None, "s": "null"}), redact_none)
    assert decode(ok.payload, 1).state == {"x": None, "s": "null"}
    with pytest.raises(CheckpointNotSerializable, match="NaN or infinity"):
        encode(Checkpoint(thread="t", step=0, state={"x": None, "y": [float("-inf")]}), redact_none)


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
    encoded = encode(cp, redact_none)
    assert (encoded.thread, encoded.step, encoded.interrupted, encoded.done) == (
        "t",
        3,
        True,
        False,
    )
    assert encoded.ts_us == parse_instant("2026-01-01T00:00:00Z") == 1_767_225_600_000_000


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
