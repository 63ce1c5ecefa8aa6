"""The newcomer's paths past the demo: every printed command pastes, every
answer says what to do, nothing is created or hidden by mistake."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from tests.backends.postgres import DSN, admin_connection
from tests.cli.support import af, env
from tests.runtime.holders import hold

Run = tuple[int, str]


def test_a_wrong_answer_names_the_choices_and_runs_nothing(here: Callable[..., Run]) -> None:
    here("demo", "--thread", "t", "--hold", "0")
    before = here("history", "t", "--json")[1]
    status, out = here("resume", "t", "--value", '"maybe"')
    assert status == 2 and "ValueError" not in out and "failed" not in out
    assert 'with the choices "approve", "reject"; --value "maybe" is not one of them' in out
    assert "e.g.: agentflow resume t --value '\"approve\"'" in out
    assert here("history", "t", "--json")[1] == before


def test_a_namespace_with_no_threads_says_names_match_exactly(here: Callable[..., Run]) -> None:
    here("--namespace", "acme", "demo", "--thread", "t", "--hold", "0")
    status, out = here("--namespace", "acmee", "threads")
    assert status == 0
    assert out.startswith("no threads in namespace 'acmee' (--namespace); a namespace is matched")
    status, out = here("threads")
    assert status == 0 and out.startswith("no threads\n")  # the default namespace: no hint


async def _long_outputs(db: Path) -> None:
    """2,000 threads, and thread ``t`` of 500 steps: more than a pipe holds."""
    async with SqliteCheckpointer(db) as store:
        for i in range(2000):
            await store.put(make_checkpoint(f"thread-{i:05}", 0, state={"i": i}))
        for step in range(500):
            await store.put(make_checkpoint("t", step, state={"n": step}))


@pytest.fixture(scope="module")
def long_outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("long")
    asyncio.run(_long_outputs(cwd / ".runs" / "checkpoints.db"))
    return cwd


@pytest.mark.parametrize(
    "args",
    [["threads", "--limit", "2000"], ["threads", "--limit", "2000", "--json"], ["history", "t"]],
    ids=" ".join,
)
def test_a_pipe_closed_early_is_a_quiet_exit_0(long_outputs: Path, args: list[str]) -> None:
    line = " ".join([sys.executable, "-m", "agentflow", *args])
    done = subprocess.run(
        ["bash", "-c", f'{line} | head -n 1 > /dev/null; echo "status=${{PIPESTATUS[0]}}"'],
        check=False,
        cwd=long_outputs,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "status=0" and done.stderr == "", done.stderr


def test_worker_once_on_a_mistyped_path_creates_nothing(tmp_path: Path) -> None:
    done = af(tmp_path, "--store", "sqlite:///.runs/checkpoint.db", "worker", "--once", check=False)
    assert done.returncode == 1 and "no store at .runs/checkpoint.db" in done.stderr
    assert not (tmp_path / ".runs").exists()


def test_a_polling_worker_started_first_says_the_store_is_empty(tmp_path: Path) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-m", "agentflow", "worker", "--interval", "0.1"],
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    assert "worker polling" in worker.stdout.readline()
    assert "holds no threads yet: waiting for runs" in worker.stdout.readline()
    worker.terminate()
    assert worker.wait(timeout=20) == 0


def test_worker_once_on_a_database_that_does_not_exist_names_it(tmp_path: Path) -> None:
    asyncio.run(_check_postgres())
    url = DSN.rsplit("/", 1)[0] + f"/no_such_db_{uuid.uuid4().hex[:8]}"
    for command in (["worker", "--once"], ["threads"]):
        done = af(tmp_path, "--store", url, *command, check=False)
        assert done.returncode == 1, done.stderr
        assert "ExceptionGroup" not in done.stderr and "TaskGroup" not in done.stderr
        assert "no_such_db_" in done.stderr and "does not exist" in done.stderr


async def _check_postgres() -> None:
    conn = await admin_connection()
    await conn.close()


def _gone_pid() -> int:
    """The pid of a process that has ended (this machine will not reuse it this soon)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


async def _killed_mid_answer(db: Path, holder: str) -> None:
    async with SqliteCheckpointer(db) as store:
        await hold(store, "t", holder, lease_ms=2_500)


def test_resume_after_a_resume_was_killed_mid_answer_waits_out_its_claim(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    here("demo", "--thread", "t", "--hold", "0")
    dead = f"{socket.gethostname()}:{_gone_pid()}:feedbeef"
    asyncio.run(_killed_mid_answer(tmp_path / ".runs" / "checkpoints.db", dead))
    status, out = here("resume", "t", "--value", '"approve"')
    assert status == 0, out
    assert f"the claim of {dead} (its process is gone): waiting" in out
    assert "done t at step 7" in out and "expected revision" not in out


def test_a_claim_held_elsewhere_says_who_until_when_and_what_to_run(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    here("demo", "--thread", "t", "--hold", "0")
    asyncio.run(_killed_mid_answer(tmp_path / ".runs" / "checkpoints.db", "elsewhere:42:beef"))
    status, out = here("resume", "t", "--value", '"approve"')
    assert status == 1 and "expected revision" not in out
    assert "step 2 is being resumed by elsewhere:42:beef (its claim holds until 20" in out
    assert "; if that process died, run this again after 20" in out
    assert "see it with: agentflow show t" in out


def test_history_json_streams_the_same_array_the_list_would_be(here: Callable[..., Run]) -> None:
    here("demo", "--thread", "t", "--hold", "0", "--approve")
    status, out = here("history", "t", "--json")
    rows = json.loads(out)
    assert status == 0 and [r["step"] for r in rows] == list(range(8))
    from agentflow.cli.render import dump_json

    assert out == dump_json(rows) + "\n"  # byte for byte the indented array


async def _waiting(db: Path, seconds: float) -> None:
    from tests.runtime.graphs import timer_graph

    async with SqliteCheckpointer(db) as store:
        result = (
            await timer_graph()
            .compile(store)
            .run({"seconds": seconds, "logfile": str(db.parent / "log")}, thread="timer")
        )
        assert result.status == "waiting"


def test_resume_counts_down_a_timer_due_within_a_minute(
    here: Callable[..., Run], tmp_path: Path
) -> None:
    spec = ["--graph", "tests.runtime.graphs:timer_graph"]
    asyncio.run(_waiting(tmp_path / ".runs" / "checkpoints.db", 1.5))
    status, out = here(*spec, "resume", "timer")
    assert status == 0, out
    assert "sleep: waiting 1." in out and "done timer at step" in out
    asyncio.run(_waiting(tmp_path / ".runs" / "later.db", 600))
    status, out = here(*spec, "--store", "sqlite:///.runs/later.db", "resume", "timer")
    assert status == 1 and "to wait for it: agentflow --store sqlite:///.runs/later.db" in out
