"""Cursors are opaque, authenticated with the store's secret, and bound to backend,
namespace and listing."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentflow.checkpoint.cursor import CursorSigner
from agentflow.errors import InvalidCursor

SECRET = os.urandom(32)
SIGNER = CursorSigner(SECRET, "sqlite", "ns")


@given(after=st.text(), namespace=st.text())
def test_round_trip(after: str, namespace: str) -> None:
    signer = CursorSigner(SECRET, "sqlite", namespace)
    assert signer.decode("threads:", signer.encode("threads:", {"after": after})) == {
        "after": after
    }


@given(position=st.integers(min_value=0), replacement=st.sampled_from("AQgw_-"))
def test_any_single_character_change_is_refused(position: int, replacement: str) -> None:
    cursor = SIGNER.encode("threads:", {"after": "thread-42"})
    position %= len(cursor)
    if cursor[position] == replacement:
        return
    tampered = cursor[:position] + replacement + cursor[position + 1 :]
    with pytest.raises(InvalidCursor):
        SIGNER.decode("threads:", tampered)


def test_foreign_store_backend_namespace_or_listing_is_refused() -> None:
    cursor = SIGNER.encode("threads:", {"after": "t"})
    others = [
        CursorSigner(os.urandom(32), "sqlite", "ns"),
        CursorSigner(SECRET, "postgres", "ns"),
        CursorSigner(SECRET, "sqlite", "other"),
        CursorSigner(SECRET, "sqlite", ""),
    ]
    for other in others:
        with pytest.raises(InvalidCursor):
            other.decode("threads:", cursor)
    for listing in ("threads:done", "due"):
        with pytest.raises(InvalidCursor):
            SIGNER.decode(listing, cursor)


def test_the_secret_never_shows() -> None:
    assert SECRET.hex() not in repr(SIGNER) and str(SECRET) not in repr(SIGNER)
    with pytest.raises(ValueError):
        CursorSigner(b"short", "sqlite", "ns")
