"""No silent surprises: what a command did not do, or could not, it says."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from tests.runtime.graphs import approval_graph, timer_graph
from tests.runtime.holders import hold

Run = tuple[int, str]
HOLDER = "other-host:4242:feedbeef"


READ_ONLY = [
    ["threads"],
    ["history", "t"],
    ["show", "t"],
    ["diff", "t", "0", "1"],
    ["prune", "t", "--before-step", "1"],
    ["delete", "t"],
    ["resume", "t"],
    ["fork", "t", "0"],
]


@pytest.mark.parametrize("args", READ_ONLY, ids=lambda a: a[0])
@pytest.mark.parametrize("url", ["sqlite:///nonexistent/dir/x.db", "file://nonexistent/dir"])
def test_commands_that_need_a_store_never_create_one(
    here: Callable[..., Run], tmp_path: Path, url: str, args: list[str]
) -> None:
    status, out = here("--store", url, *args)
    assert status == 1 and "no store at nonexistent/dir" in out, out
    assert not (tmp_path / "nonexistent").exists()


def test_prune_keeps_the_latest_checkpoint_and_says_so(here: Callable[..., Run]) -> None:
    run = here
    assert run("demo", "--approve", "--hold", "0", "--thread", "t")[0] == 0
    status, out = run("prune", "t", "--before-step", "99")
    assert status == 0
    assert "pruned 7 checkpoint(s) of t; kept the latest, step 7" in out
    assert run("show", "t")[0] == 0
    status, out = run("history", "t")
    assert "(the steps before are pruned) -> done" in out


def test_prune_older_than_now_keeps_the_latest_and_states_utc(here: Callable[..., Run]) -> None:
    run = here
    run("demo", "--approve", "--hold", "0", "--thread", "t")
    naive = (datetime.now(UTC) + timedelta(minutes=1)).replace(tzinfo=None).isoformat()
    status, out = run("prune", "t", "--older-than", naive)
    assert status == 0
    assert f"--older-than {naive} has no offset: read as UTC, {naive}+00:00" in out
    assert "kept the latest, step 7" in out
    status, out = run("prune", "t", "--older-than", naive, "--include-latest")
    assert status == 0 and "pruned 1 checkpoint(s) of t" in out and "kept" not in out
    assert run("show", "t")[0] == 1


def test_prune_says_nothing_of_the_latest_when_its_bound_stops_short(
    here: Callable[..., Run],
) -> None:
    run = here
    run("demo", "--approve", "--hold", "0", "--thread", "t")
    status, out = run("prune", "t", "--before-step", "3")
    assert status == 0 and out.strip() == "pruned 3 checkpoint(s) of t"


def test_history_after_a_partial_prune_does_not_invent_an_input(here: Callable[..., Run]) -> None:
    run = here
    run("demo", "--approve", "--hold", "0", "--thread", "t")
    run("prune", "t", "--before-step", "3")
    rows = json.loads(run("history", "t", "--json")[1])
    assert rows[0]["step"] == 3 and rows[0]["event"] == "(the steps before are pruned)"
    assert rows[1]["event"].startswith("hold waits until") and rows[2]["event"] == "ran hold"
    _, table = run("history", "t")
    first = next(line for line in table.splitlines() if line.startswith("│ 3 "))
    assert "(the steps before are pruned)" in first and "?" in first
    assert "input" not in table


def test_resume_without_an_answer_shows_the_question(here: Callable[..., Run]) -> None:
    run = here
    run("demo", "--thread", "t", "--hold", "0")
    status, out = run("resume", "t")
    assert status == 2
    assert "waits for an answer from request_approval: Refund $99.91" in out
    assert "(choices: approve, reject)" in out
    assert "agentflow resume t --value '\"approve\"'" in out
    assert run("show", "t", "--json")[1].count('"status": "interrupted"') == 1


async def _held_by_another_process(db: Path, graph_name: str) -> None:
    async with SqliteCheckpointer(db) as store:
        graph = (timer_graph() if graph_name == "timer" else approval_graph()).compile(store)
        await graph.run({"seconds": 0, "logfile": str(db.parent / "log")}, thread="held")
        cp = await store.get("held")
        assert cp is not None and cp.interrupted
        await hold(store, "held", HOLDER, lease_ms=5 * 60_000)


def test_worker_once_says_when_nothing_is_due_and_who_holds_a_run(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    run = here
    spec = ["--graph", "tests.runtime.graphs:timer_graph"]
    run("demo", "--thread", "idle", "--hold", "0")
    assert run(*spec, "worker", "--once") == (0, "nothing due\n")
    asyncio.run(_held_by_another_process(tmp_path / ".runs" / "checkpoints.db", "timer"))
    status, out = run(*spec, "worker", "--once")
    assert status == 0
    assert out.startswith(f"skipped held: thread 'held' step 1 is being resumed by {HOLDER}")
    assert "its claim holds until 20" in out
    status, out = run(*spec, "worker", "--once", "--json")
    assert f"is being resumed by {HOLDER}" in out and '"thread": "held"' in out


def test_a_held_suspend_names_its_holder_and_show_tells_held_from_answered(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    run = here
    spec = ["--graph", "tests.runtime.graphs:approval_graph"]
    asyncio.run(_held_by_another_process(tmp_path / ".runs" / "checkpoints.db", "approval"))
    status, out = run(*spec, "resume", "held", "--value", '"yes"')
    assert status == 1
    assert f"thread 'held' step 2 is being resumed by {HOLDER} (its claim holds until" in out
    assert "see it with: agentflow --graph tests.runtime.graphs:approval_graph show held" in out
    status, out = run("show", "held")
    assert f"claimed  by {HOLDER} until" in out
    run("demo", "--approve", "--hold", "0", "--thread", "done")
    status, out = run("show", "done", "--step", "2")
    assert "resumed  by" in out and "claimed" not in out and "until" not in out


async def _leaky_thread(db: Path) -> None:
    from tests.cli.bad_graphs import leaky

    async with SqliteCheckpointer(db) as store:
        graph = leaky().compile(store, step_limit=1)
        with pytest.raises(Exception, match="KeyError"):
            await graph.run({}, thread="leak")


def test_a_failed_node_is_reported_without_its_exceptions_text(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    asyncio.run(_leaky_thread(tmp_path / ".runs" / "checkpoints.db"))
    status, out = here("--graph", "tests.cli.bad_graphs:leaky", "resume", "leak")
    assert status == 1 and "SUPERSECRET" not in out
    assert "node 'leak' failed in thread 'leak' after step 0 with KeyError" in out
    assert "AGENTFLOW_DEBUG=1 shows the node's exception" in out


def test_the_default_store_is_owner_only(here: Callable[..., Run], tmp_path: Path) -> None:
    assert here("demo", "--approve", "--hold", "0", "--thread", "t")[0] == 0
    runs = tmp_path / ".runs"
    assert runs.stat().st_mode & 0o777 == 0o700
    for path in runs.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600, path


def test_fork_update_says_whether_the_route_changed(here: Callable[..., Run]) -> None:
    here("demo", "--approve", "--hold", "0", "--thread", "t")
    reject = '{"decision": "reject"}'
    status, out = here("fork", "t", "3", "--to", "no", "--update", reject)
    assert status == 0 and "re-routed from the updated state: next was hold, now notify" in out
    assert "agentflow resume no" in out
    status, out = here("fork", "t", "3", "--to", "same", "--update", '{"note": 1}')
    assert "the update leaves the route as it was: next is hold" in out
    status, out = here("fork", "t", "3", "--to", "kept", "--update", reject, "--keep-route")
    assert "kept the stored route (--keep-route): next is hold" in out
    status, out = here("resume", "no", "--json")
    assert status == 0 and '"status": "done"' in out and '"refund"' not in out
