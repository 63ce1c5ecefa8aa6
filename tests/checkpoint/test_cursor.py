"""Cursors are opaque, integrity-checked and bound to backend and namespace."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentflow.checkpoint.cursor import decode_cursor, encode_cursor
from agentflow.errors import InvalidCursor


@given(after=st.text(), namespace=st.text())
def test_round_trip(after: str, namespace: str) -> None:
    assert decode_cursor("sqlite", namespace, encode_cursor("sqlite", namespace, after)) == after


@given(position=st.integers(min_value=0), replacement=st.sampled_from("AQgw_-"))
def test_any_single_character_change_is_refused(position: int, replacement: str) -> None:
    cursor = encode_cursor("sqlite", "ns", "thread-42")
    position %= len(cursor)
    if cursor[position] == replacement:
        return
    tampered = cursor[:position] + replacement + cursor[position + 1 :]
    with pytest.raises(InvalidCursor):
        decode_cursor("sqlite", "ns", tampered)


def test_foreign_backend_or_namespace_is_refused() -> None:
    cursor = encode_cursor("sqlite", "ns", "t")
    for backend, namespace in (("postgres", "ns"), ("sqlite", "other"), ("sqlite", "")):
        with pytest.raises(InvalidCursor):
            decode_cursor(backend, namespace, cursor)
