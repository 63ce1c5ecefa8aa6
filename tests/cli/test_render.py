"""The pure parts of the command line: state diffs, events, store URLs."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.stores import has_password, local_path, safe_url, server_hosts
from agentflow.cli.render import diff_json, diff_states, event_of
from agentflow.cli.session import _with_timeouts
from agentflow.cli.text import inert, shell_word
from agentflow.cli.timeline import Timeline
from agentflow.errors import InvalidStoreUrl


def test_diff_walks_mappings_and_reports_appends() -> None:
    old = {"a": 1, "gone": True, "nested": {"x": 1, "y": 2}, "log": ["a"]}
    new = {"a": 1, "nested": {"x": 1, "y": 3}, "log": ["a", "b"], "new": None}
    assert diff_json(diff_states(old, new)) == [
        {"path": "/gone", "change": "removed", "old": True},
        {"path": "/nested/y", "change": "changed", "old": 2, "new": 3},
        {"path": "/log", "change": "appended", "new": ["b"]},
        {"path": "/new", "change": "added", "new": None},
    ]
    assert diff_states(old, old) == []
    assert diff_json(diff_states(1, 2)) == [{"path": "", "change": "changed", "old": 1, "new": 2}]


def test_diff_paths_are_json_pointers_that_tell_keys_apart() -> None:
    literal = diff_states({"refund.amount": 1}, {"refund.amount": 2})
    nested = diff_states({"refund": {"amount": 1}}, {"refund": {"amount": 2}})
    odd = diff_states({"a/b": 1, "m~n": 1}, {"a/b": 2, "m~n": 2})
    assert [c[0] for c in literal] == ["/refund.amount"]
    assert [c[0] for c in nested] == ["/refund/amount"]
    assert [c[0] for c in odd] == ["/a~1b", "/m~0n"]
    before = Checkpoint("t", 0, {"refund.amount": 1, "a/b": 1}, next=("a",))
    step = Checkpoint("t", 1, {"refund.amount": 2, "a/b": 2}, parent="t:0")
    timeline = Timeline()
    timeline.row(before)
    assert timeline.row(step)[1] == "/a~1b, /refund.amount"  # history's "changed" column


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
    assert local_path("sqlite:///runs.db") == Path("runs.db")
    assert local_path("sqlite:////tmp/runs.db") == Path("/tmp/runs.db")
    assert local_path("file:///var/runs") == Path("/var/runs")
    with pytest.raises(InvalidStoreUrl):
        local_path("sqlite://")
    assert safe_url("postgresql://me:pw@db:5432/x") == "postgresql://me@db:5432/x"
    assert safe_url("redis://localhost") == "redis://localhost"


def test_passwords_are_found_and_masked_in_seed_lists() -> None:
    url = "mongodb://me:pw@a:1,b:2/db?replicaSet=rs"
    assert has_password(url) and not has_password("mongodb://me@a:1")
    assert safe_url(url) == "mongodb://me@a:1,b:2/db?replicaSet=rs"
    assert server_hosts(url) == "a:1,b:2"


def test_cli_timeouts_are_added_unless_the_url_sets_them() -> None:
    assert _with_timeouts("mongodb://h/?serverSelectionTimeoutMS=200", "mongodb") == (
        "mongodb://h/?serverSelectionTimeoutMS=200&connectTimeoutMS=5000"
    )
    assert "socket_connect_timeout=5" in _with_timeouts("rediss://h:6380/0", "rediss")
    assert (
        _with_timeouts("postgresql://h/db", "postgresql") == "postgresql://h/db?connect_timeout=5"
    )
    assert _with_timeouts("postgres://h/db?connect_timeout=9", "postgres").endswith("timeout=9")
    hostless = "postgresql:///db?host=/run/postgresql"  # urlunsplit would drop its //
    assert _with_timeouts(hostless, "postgresql") == f"{hostless}&connect_timeout=5"


def test_inert_escapes_what_a_terminal_would_act_on_and_nothing_else() -> None:
    assert inert("plain [bold] :smile: café 日本") == "plain [bold] :smile: café 日本"
    assert inert("a\x1b[2Jb\x9bc\u202ed\ne\u200b") == "a\\u001b[2Jb\\u009bc\\u202ed\\u000ae\\u200b"


def test_shell_words_round_trip_through_bash() -> None:
    import subprocess

    words = ["plain", "it's", "", "esc\x1b[2J", "bidi\u202e", "back\\slash\x07"]
    quoted = " ".join(shell_word(w) for w in words)
    out = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {quoted}"], capture_output=True, check=True
    ).stdout
    assert out.split(b"\0")[:-1] == [w.encode() for w in words]
