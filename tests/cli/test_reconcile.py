"""``journal``, ``reconcile`` and ``threads --status reconciliation_required``: an
operator settles a call that may have acted, from the command line."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
from collections.abc import Callable
from pathlib import Path

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from tests.cli.hostile import COMBINED
from tests.runtime.graphs import ledger_lines, lost_reply_graph

Run = tuple[int, str]
SPEC = ["--graph", "tests.runtime.graphs:lost_reply_graph"]


async def _lost_replies(db: Path, ledger: Path, *threads: str) -> None:
    db.parent.mkdir(mode=0o700, exist_ok=True)
    async with SqliteCheckpointer(db) as store:
        compiled = lost_reply_graph().compile(store)
        for thread in threads:
            result = await compiled.run({"ledger": f"{ledger}-{len(thread)}"}, thread=thread)
            assert result.status == "reconciliation_required"


def _setup(tmp_path: Path, *threads: str) -> Path:
    ledger = tmp_path / "ledger"
    asyncio.run(_lost_replies(tmp_path / ".runs" / "checkpoints.db", ledger, *threads))
    return ledger


def _operation(run: Callable[..., Run], thread: str) -> str:
    status, out = run("journal", thread, "--json")
    assert status == 0
    [pending] = json.loads(out)["pending"]
    return str(pending["operation_id"])


def test_an_operator_replays_the_receipt_and_the_run_finishes_charged_once(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    run, ledger = here, _setup(tmp_path, "order-7")
    status, out = run("threads", "--status", "reconciliation_required")
    assert status == 0 and "order-7" in out and "reconciliation_required" in out
    listed = json.loads(run("threads", "--status", "reconciliation_required", "--json")[1])
    assert [t["thread"] for t in listed["threads"]] == ["order-7"]
    assert run("threads", "--status", "done")[1] == "no done threads\n"
    status, out = run("journal", "order-7")
    assert status == 0 and "ambiguous" in out and "unknown_tool_side_effect" in out
    operation = _operation(run, "order-7")
    assert f"agentflow reconcile order-7 {operation} --attempt 1 --decision retry" in out
    assert "durable  reconciliation_required: 1 call(s) may have acted" in run("show", "order-7")[1]
    status, out = run(*SPEC, "resume", "order-7")  # the policies cannot decide it
    assert status == 0 and "reconciliation required in order-7" in out
    receipt = '{"charged": 700}'
    status, out = run(
        "reconcile",
        "order-7",
        operation,
        "--attempt",
        "1",
        "--decision",
        "replay_success",
        "--receipt",
        receipt,
    )
    assert status == 0 and f"recorded replay_success for {operation} of order-7" in out
    # reconcile needs no graph, the resume it prints does: it says so, and where it goes
    assert "agentflow --graph MODULE:ATTR resume order-7   # MODULE:ATTR: where graph" in out
    status, out = run("--graph", "MODULE:ATTR", "resume", "order-7")  # pasted unfilled
    assert status == 2 and "MODULE:ATTR stands for where your graph is defined" in out
    assert "No module named" not in out
    status, out = run(*SPEC, "resume", "order-7", "--json")
    assert status == 0 and json.loads(out)["state"]["receipt"] == {"charged": 700}
    assert len(ledger_lines(f"{ledger}-7")) == 1
    assert run("threads", "--status", "reconciliation_required")[1].startswith("no ")


def test_an_operator_can_record_a_failure_retry_or_abort(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    run, ledger = here, _setup(tmp_path, "a", "bb", "ccc")
    failed = run(
        "reconcile", "a", _operation(run, "a"), "--attempt", "1", "--decision", "record_failure",
        "--error-code", "not_charged", "--message", "the bank has no such charge", "--json",
    )  # fmt: skip
    assert json.loads(failed[1])["status"] == "running"
    status, out = run(*SPEC, "resume", "a")
    assert status == 1 and "node 'charge' failed" in out and "CallFailed" in out
    status, out = run(
        *SPEC, "reconcile", "bb", _operation(run, "bb"), "--attempt", "1", "--decision", "retry"
    )
    assert status == 0 and f"  agentflow --graph {SPEC[1]} resume bb\n" in out  # pastes as is
    assert run(*SPEC, "resume", "bb")[0] == 0
    assert len(ledger_lines(f"{ledger}-2")) == 2  # retried on purpose: a second charge
    status, out = run(
        "reconcile", "ccc", _operation(run, "ccc"), "--attempt", "1", "--decision", "abort"
    )
    assert status == 0 and "ccc ended as failed; the ambiguity stays on record" in out
    status, out = run(*SPEC, "resume", "ccc")
    assert status == 1 and "was ended (failed)" in out


def test_bad_decisions_are_refused_and_nothing_is_written(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    run = here
    _setup(tmp_path, "t")
    operation = _operation(run, "t")
    before = run("journal", "t", "--json")[1]
    status, out = run("reconcile", "t", operation, "--attempt", "1", "--decision", "replay_success")
    assert status == 2 and "needs --receipt JSON" in out
    status, out = run(
        "reconcile",
        "t",
        operation,
        "--attempt",
        "1",
        "--decision",
        "replay_success",
        "--receipt",
        "{oops",
    )
    assert status == 2 and "--receipt must be JSON" in out
    status, out = run(
        "reconcile", "t", operation, "--attempt", "1", "--decision", "retry", "--message", "x"
    )
    assert status == 2 and "go with record_failure or abort only" in out
    status, out = run("reconcile", "t", COMBINED, "--attempt", "1", "--decision", "retry", "--json")
    assert status == 1 and json.loads(out)["error"] == "unknown_operation"
    assert "\x1b" not in out and "\u202e" not in out
    status, out = run("reconcile", "t", operation, "--attempt", "1", "--decision", "maybe")
    assert status == 2 and "invalid choice: 'maybe'" in out
    assert run("journal", "t", "--json")[1] == before
    status, out = run("reconcile", "t", operation, "--attempt", "1", "--decision", "defer")
    assert status == 0 and "1 call(s) still wait for a decision" in out
    status, out = run("journal", "ghost")
    assert status == 1 and "thread 'ghost' not found" in out


def test_journal_lists_a_finished_runs_calls_and_their_commands_paste_back(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    run = here
    assert run("demo", "--approve", "--hold", "0", "--thread", "d")[0] == 0
    status, out = run("journal", "d")
    assert status == 0 and "d: completed" in out
    assert [line.split()[3:5] for line in out.splitlines() if "op_tool" in line] == [
        ["refund", "succeeded"],
        ["email", "succeeded"],
    ]
    # --json carries every call's idempotency key, finished ones too (not only in flight):
    # the demo's refund id derives from it, as a payment provider's would
    calls = {op["name"]: op for op in json.loads(run("journal", "d", "--json")[1])["operations"]}
    assert {name: op["in_flight"] for name, op in calls.items()} == {
        "refund": False,
        "email": False,
    }
    key = calls["refund"]["idempotency_key"]
    refund = json.loads(run("show", "d", "--json")[1])["state"]["refund"]
    assert key.startswith("idem_")
    assert refund["id"] == "rf_" + hashlib.sha256(f"refund:{key}".encode()).hexdigest()[:12]
    assert calls["email"]["idempotency_key"].startswith("idem_")
    _setup(tmp_path, "needs decision")
    status, out = run("journal", "needs decision")
    commands = [line.strip() for line in out.splitlines() if "reconcile" in line]
    assert shlex.split(commands[0])[1:3] == ["reconcile", "needs decision"]


def test_every_command_prints_json_with_json(here: Callable[..., Run], tmp_path: Path) -> None:
    run = here
    _setup(tmp_path, "r")
    steps = [
        ["demo", "--approve", "--hold", "0", "--thread", "d"],
        ["demo", "--hold", "0", "--thread", "p"],
        ["threads"],
        ["threads", "--status", "reconciliation_required"],
        ["history", "d"],
        ["show", "d"],
        ["diff", "d", "0", "1"],
        ["fork", "d", "2", "--to", "f"],
        ["resume", "f", "--value", '"reject"'],
        ["journal", "r"],
        ["reconcile", "r", _operation(run, "r"), "--attempt", "1", "--decision", "defer"],
        ["prune", "d", "--before-step", "2"],
        ["worker", "--once"],
        ["copy", "sqlite:///.runs/checkpoints.db", "sqlite:///.runs/copy.db"],
        ["delete", "p"],
    ]
    for words in steps:
        status, out = run(*words, "--json")
        assert status == 0, (words, out)
        assert isinstance(json.loads(out), dict | list), words
