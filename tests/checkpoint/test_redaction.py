from __future__ import annotations

import pytest

from agentflow.checkpoint import DEFAULT_MASK, RedactKeys, redact_none


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
