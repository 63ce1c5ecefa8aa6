"""The pure parts of the command line: state diffs, events, store URLs."""

from __future__ import annotations

import pytest

from agentflow.checkpoint.base import Checkpoint
from agentflow.cli.render import diff_json, diff_states, event_of
from agentflow.cli.stores import InvalidStoreUrl, _location, safe_url


def test_diff_walks_mappings_and_reports_appends() -> None:
    old = {"a": 1, "gone": True, "nested": {"x": 1, "y": 2}, "log": ["a"]}
    new = {"a": 1, "nested": {"x": 1, "y": 3}, "log": ["a", "b"], "new": None}
    assert diff_json(diff_states(old, new)) == [
        {"path": "gone", "change": "removed", "old": True},
        {"path": "nested.y", "change": "changed", "old": 2, "new": 3},
        {"path": "log", "change": "appended", "new": ["b"]},
        {"path": "new", "change": "added", "new": None},
    ]
    assert diff_states(old, old) == []


def test_events_name_what_produced_each_step() -> None:
    start = Checkpoint("t", 0, {}, next=("a", "b"))
    ran = Checkpoint("t", 1, {}, next=(), parent="t:0")
    asked = Checkpoint(
        "t",
        1,
        {},
        next=("a",),
        interrupted=True,
        interrupt_node="a",
        interrupt_payload={"question": "ok?"},
    )
    forked = Checkpoint("f", 3, {}, next=("a",), parent="t:3")
    assert event_of(None, start) == "input"
    assert event_of(start, ran) == "ran a, b -> done"
    assert event_of(start, asked) == "a asks: ok?"
    assert event_of(None, forked) == "forked from t:3"


def test_store_urls() -> None:
    assert _location("sqlite:///runs.db", "sqlite") == "runs.db"
    assert _location("sqlite:////tmp/runs.db", "sqlite") == "/tmp/runs.db"
    assert _location("file:///var/runs", "file") == "/var/runs"
    with pytest.raises(InvalidStoreUrl):
        _location("sqlite://", "sqlite")
    assert safe_url("postgresql://me:pw@db:5432/x") == "postgresql://me:***@db:5432/x"
    assert safe_url("redis://localhost") == "redis://localhost"
