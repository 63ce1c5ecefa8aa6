"""``agentflow events THREAD [--follow] [--json]``: a run's lifecycle events, read from the
store's event log as a consumer reads them, in order, and followed as they come."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tests.cli.support import command, env
from tests.cli.test_reconcile import SPEC, _operation, _setup

Run = tuple[int, str]
WAITING = ["checkpoint_created", "operation_ambiguous", "reconciliation_required"]


def _types(out: str) -> list[str]:
    return [json.loads(line)["type"] for line in out.splitlines()]


def test_a_runs_events_are_listed_in_order_and_as_json_lines(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    run = here
    _setup(tmp_path, "order-7")
    status, out = run("events", "order-7")
    assert status == 0
    assert [line.split()[1] for line in out.splitlines()] == WAITING  # after the time
    operation = _operation(run, "order-7")
    assert f"operation_ambiguous  cycle 1  {operation}  risk=" in out
    status, out = run("events", "order-7", "--json")
    assert status == 0 and _types(out) == WAITING
    first = json.loads(out.splitlines()[0])
    assert first["event_id"].startswith("evt_") and set(first["cursor"]) == {"cursor"}
    assert first["run_id"] == "order-7" and first["resume_attempt"] == 1
    decision = ["--attempt", "1", "--decision", "replay_success", "--receipt", '{"charged": 7}']
    assert run("reconcile", "order-7", operation, *decision)[0] == 0
    assert run(*SPEC, "resume", "order-7")[0] == 0
    status, out = run("events", "order-7", "--json")
    assert status == 0 and _types(out)[: len(WAITING)] == WAITING
    later = [json.loads(line) for line in out.splitlines()[len(WAITING) :]]
    resolved = [e for e in later if e["type"] == "reconciliation_resolved"]
    assert [(e["operation_id"], e["decision"]) for e in resolved] == [(operation, "replay_success")]
    assert any(e["type"] == "operation_replayed" for e in later)


def test_an_unknown_thread_is_an_error_and_a_thread_without_events_says_so(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    run = here
    _setup(tmp_path, "order-7")
    status, out = run("events", "ghost")
    assert status == 1 and "thread 'ghost' not found" in out
    status, out = run("--namespace", "elsewhere", "events", "order-7")
    assert status == 1 and "not found" in out


def _read_until(stream: IO[str], wanted: str) -> list[dict[str, Any]]:
    """The events read from ``stream`` up to and including one of type ``wanted``."""
    seen = []
    for line in stream:
        seen.append(json.loads(line))
        if seen[-1]["type"] == wanted:
            return seen
    raise AssertionError(f"the stream ended before {wanted}: {seen}")


def test_follow_prints_new_events_as_they_come_and_one_ctrl_c_ends_it(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    run = here
    _setup(tmp_path, "order-7")
    operation = _operation(run, "order-7")
    following = subprocess.Popen(
        command("events", "order-7", "--follow", "--json", "--interval", "0.1"),
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert following.stdout is not None
        assert [e["type"] for e in _read_until(following.stdout, WAITING[-1])] == WAITING
        decision = ["--attempt", "1", "--decision", "replay_success", "--receipt", "{}"]
        assert run("reconcile", "order-7", operation, *decision)[0] == 0  # another process
        [resolved] = _read_until(following.stdout, "reconciliation_resolved")[-1:]
        assert resolved["operation_id"] == operation
        following.send_signal(signal.SIGINT)
        assert following.wait(timeout=20) == 130
    finally:
        if following.poll() is None:
            following.kill()
            following.wait()
