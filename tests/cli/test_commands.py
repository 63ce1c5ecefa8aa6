"""The ``agentflow`` command end to end, as subprocesses on SQLite."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.support import af, af_json, env


def test_bare_command_prints_help(tmp_path: Path) -> None:
    done = af(tmp_path)
    assert "usage: agentflow" in done.stdout and "demo" in done.stdout


def test_python_m_agentflow_is_the_command(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "agentflow", "demo", "--approve", "--hold", "0", "--thread", "m"]
    done = subprocess.run(run, cwd=tmp_path, env=env(), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "done m at step 7" in done.stdout
    assert af_json(tmp_path, "show", "m")["status"] == "done"


def test_demo_runs_to_the_end_on_the_default_store(tmp_path: Path) -> None:
    done = af(tmp_path, "demo", "--approve", "--hold", "0.2", "--thread", "d1")
    assert "done d1 at step 7" in done.stdout
    assert "ran lookup_order, lookup_customer" in done.stdout
    assert "refund" in done.stdout and "is on its way" in done.stdout
    assert (tmp_path / ".runs" / "checkpoints.db").exists()
    rows = af_json(tmp_path, "history", "d1")
    assert [r["step"] for r in rows] == list(range(8))
    assert rows[2]["status"] == "interrupted" and rows[4]["status"] == "waiting"
    assert rows[-1]["event"] == "ran notify -> done"
    listing = af_json(tmp_path, "threads", "--status", "done")
    assert [t["thread"] for t in listing["threads"]] == ["d1"]


def test_demo_without_tty_stops_at_approval_and_prints_the_command(tmp_path: Path) -> None:
    done = af(tmp_path, "demo", "--thread", "d2", "--hold", "0.2")
    assert "paused at request_approval" in done.stdout
    lines = [line.strip() for line in done.stdout.splitlines() if "--value" in line]
    assert lines == [
        "agentflow resume d2 --value '\"approve\"'",
        "agentflow resume d2 --value '\"reject\"'",
    ]
    assert af_json(tmp_path, "show", "d2")["status"] == "interrupted"
    resumed = af(tmp_path, *shlex.split(lines[1])[1:])
    assert "done d2 at step 4" in resumed.stdout and "could not approve" in resumed.stdout


def test_show_diff_fork_prune_delete(tmp_path: Path) -> None:
    af(tmp_path, "demo", "--approve", "--hold", "0.1", "--thread", "src")
    shown = af_json(tmp_path, "show", "src", "--step", "2")
    assert shown["interrupt_node"] == "request_approval" and shown["claim"] is None
    assert shown["resumed_by"] and shown["latest"] is False
    diff = af_json(tmp_path, "diff", "src", "0", "1")
    assert {c["path"] for c in diff["changes"]} >= {"/customer", "/order", "/log"}
    assert "state diff 0 -> 1" in af(tmp_path, "diff", "src", "0", "1").stdout
    forked = af_json(tmp_path, "fork", "src", "2", "--to", "what-if")
    assert forked["parent"] == "src:2" and forked["status"] == "interrupted"
    rejected = af_json(tmp_path, "resume", "what-if", "--value", '"reject"')
    assert rejected["status"] == "done" and "refund" not in rejected["state"]
    assert af_json(tmp_path, "show", "src")["state"]["refund"]["status"] == "succeeded"
    pruned = af_json(tmp_path, "prune", "src", "--before-step", "3")
    assert pruned["removed"] == 3 and pruned["kept_latest"] is None
    assert af_json(tmp_path, "history", "src")[0]["step"] == 3
    af(tmp_path, "delete", "src")
    listing = af_json(tmp_path, "threads")
    assert [t["thread"] for t in listing["threads"]] == ["what-if"]


def test_threads_are_paginated_and_filtered(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        af(tmp_path, "demo", "--thread", name)
    af(tmp_path, "resume", "b", "--value", '"reject"')
    first = af_json(tmp_path, "threads", "--limit", "2")
    assert [t["thread"] for t in first["threads"]] == ["a", "b"]
    rest = af_json(tmp_path, "threads", "--limit", "2", "--cursor", first["next_cursor"])
    assert [t["thread"] for t in rest["threads"]] == ["c"] and rest["next_cursor"] is None
    waiting = af_json(tmp_path, "threads", "--status", "interrupted")
    assert [t["thread"] for t in waiting["threads"]] == ["a", "c"]


@pytest.fixture(scope="module")
def waiting_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose thread ``t`` waits an hour on its timer; the failing
    commands below change nothing, so one store serves them all."""
    cwd = tmp_path_factory.mktemp("errors")
    af(cwd, "demo", "--thread", "t", "--hold", "3600")
    af(cwd, "resume", "t", "--value", '"approve"')
    return cwd


@pytest.mark.parametrize(
    ("args", "needle", "status"),
    [
        (["show", "ghost"], "thread 'ghost' not found", 1),
        (["history", "ghost"], "thread 'ghost' not found", 1),
        (["resume", "ghost"], "thread 'ghost' not found", 1),
        (["show", "t", "--step", "99"], "has no step 99", 1),
        (["diff", "t", "0", "99"], "has no step 99", 1),
        (["fork", "t", "99"], "has no step 99", 1),
        (["resume", "t"], "waiting until", 1),
        (["resume", "t", "--value", "approve"], "--value must be JSON", 2),
        (["show", "t", "--store", "ftp://x"], "unsupported store URL", 2),
        (["prune", "t"], "prune needs --before-step N, --older-than TIME, or both", 2),
        (["prune", "t", "--older-than", "yesterday"], "--older-than takes an ISO-8601", 2),
        (["show", "t", "--namespace", ""], "--namespace must not be empty", 2),
        (["fork", "t", "0", "--update", "[1]"], "--update must be a JSON object", 2),
    ],
)
def test_user_errors_are_one_line_with_a_consistent_status(
    waiting_store: Path, args: list[str], needle: str, status: int
) -> None:
    """1: the command could not be carried out; 2: the command line is wrong."""
    done = af(waiting_store, *args, check=False)
    assert done.returncode == status, done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_errors_are_json_with_json_and_passwords_are_masked(
    waiting_store: Path, tmp_path: Path
) -> None:
    done = af(waiting_store, "show", "ghost", "--json", check=False)
    assert json.loads(done.stderr) == {
        "error": "thread_not_found",
        "message": "thread 'ghost' not found",
    }
    bad = af(tmp_path, "threads", "--store", "mysql://user:secret@host/db", check=False)
    assert bad.returncode == 2 and "secret" not in bad.stderr and "mysql://user@host" in bad.stderr
