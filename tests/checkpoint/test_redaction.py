from __future__ import annotations

from typing import Any

import pytest

from agentflow.checkpoint import DEFAULT_MASK, Checkpoint, RedactKeys, redact_none
from agentflow.checkpoint.redaction import redact_checkpoint
from agentflow.errors import CheckpointNotSerializable


def test_masks_nested_keys_case_insensitively_without_mutating() -> None:
    value = {"Token": "a", "list": [{"token": "b"}, ("x", {"TOKEN": "c"})], "k": {"ok": 1}}
    redacted = RedactKeys(["token"])(value)
    assert redacted == {
        "Token": DEFAULT_MASK,
        "list": [{"token": DEFAULT_MASK}, ["x", {"TOKEN": DEFAULT_MASK}]],
        "k": {"ok": 1},
    }
    assert value["Token"] == "a"


def test_custom_mask_and_identity() -> None:
    assert RedactKeys(["pw"], mask=None)({"pw": {"deep": 1}}) == {"pw": None}
    marker = {"a": 1}
    assert redact_none(marker) is marker


def test_a_single_string_is_not_a_key_list() -> None:
    with pytest.raises(TypeError):
        RedactKeys("password")


def test_state_nested_too_deep_is_a_typed_error_not_recursion() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(1_500):
        node["d"] = {}
        node = node["d"]
    with pytest.raises(CheckpointNotSerializable):
        RedactKeys(["secret"])(deep)


def test_the_runtime_bookkeeping_keeps_its_shape() -> None:
    cp = Checkpoint(
        thread="t",
        step=0,
        state={"graph": "mine"},
        extra={
            "graph": "user key",
            "runtime": {"graph": "g", "writes": {"n": {"graph": 1}}, "claim": {"owner": "w"}},
        },
    )
    got = redact_checkpoint(cp, RedactKeys(["graph", "writes", "owner"]))
    assert got.state == {"graph": DEFAULT_MASK}
    assert got.extra == {
        "graph": DEFAULT_MASK,
        "runtime": {
            "graph": "g",
            "writes": {"n": {"graph": DEFAULT_MASK}},
            "claim": {"owner": "w"},
        },
    }
