"""Several processes at once: timer workers, and a demo killed and resumed."""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from tests.cli.support import af, af_json, command, env
from tests.runtime.graphs import timer_graph

TIMERS = 100
WORKERS = 3


async def _suspend_timers(db: Path, logfile: Path) -> None:
    async with SqliteCheckpointer(db) as store:
        compiled = timer_graph().compile(store)
        for i in range(TIMERS):
            await compiled.run({"seconds": 0, "logfile": str(logfile)}, thread=f"timer-{i:03}")


@pytest.mark.slow
def test_three_worker_processes_resume_each_due_run_exactly_once(tmp_path: Path) -> None:
    db, logfile = tmp_path / "runs.db", tmp_path / "effects.log"
    asyncio.run(_suspend_timers(db, logfile))
    args = ["worker", "--once", "--json", "--store", f"sqlite:///{db}"]
    args += ["--graph", "tests.runtime.graphs:timer_graph"]
    workers = [
        subprocess.Popen(command(*args), cwd=tmp_path, env=env(), stdout=subprocess.PIPE, text=True)
        for _ in range(WORKERS)
    ]
    reports = [json.loads(w.communicate(timeout=120)[0]) for w in workers]
    assert all(w.returncode == 0 for w in workers)
    effects = Counter(line.split()[0] for line in logfile.read_text().splitlines())
    assert len(effects) == TIMERS and set(effects.values()) == {1}
    resumed = [r["thread"] for report in reports for r in report["resumed"]]
    assert sorted(resumed) == sorted(effects)
    listing = af_json(tmp_path, "threads", "--store", f"sqlite:///{db}", "--limit", "500")
    assert {t["status"] for t in listing["threads"]} == {"done"}


def _continue(cwd: Path, thread: str) -> dict[str, object]:
    """Resume a killed demo the way a user would, answering the approval."""
    for _ in range(6):
        state: dict[str, object] = af_json(cwd, "show", thread)
        if state["status"] == "done":
            return state
        if state["status"] == "interrupted":
            af(cwd, "resume", thread, "--value", '"approve"')
        else:
            af(cwd, "resume", thread, "--wait")
    raise AssertionError(f"{thread} did not finish")


def _without_refund_ids(state: object) -> str:
    """``state`` as JSON, each refund id blanked: the payment provider names a refund
    by the call's idempotency key, which is unique per run, so two runs never share it."""
    return re.sub(r"rf_[0-9a-f]{12}", "rf_*", json.dumps(state, sort_keys=True))


@pytest.mark.slow
def test_a_killed_demo_continues_with_resume(tmp_path: Path) -> None:
    rng = random.Random(11)
    for trial in range(3):
        thread = f"killed-{trial}"
        reference = tmp_path / f"reference-{trial}"
        reference.mkdir()
        args = ["demo", "--approve", "--hold", "0.3", "--thread", thread]
        expected = json.loads(af(reference, *args, "--json").stdout)["state"]
        demo = subprocess.Popen(
            command(*args), cwd=tmp_path, env=env(), stdout=subprocess.PIPE, text=True
        )
        assert demo.stdout is not None and "refund agent" in demo.stdout.readline()
        time.sleep(rng.uniform(0, 0.5))
        demo.send_signal(signal.SIGKILL)
        demo.wait(timeout=10)
        if af(tmp_path, "show", thread, check=False).returncode != 0:
            continue  # killed before its first checkpoint: nothing to continue
        finished = _continue(tmp_path, thread)["state"]
        assert _without_refund_ids(finished) == _without_refund_ids(expected)
        assert json.dumps(finished) != json.dumps(expected)  # two runs, two idempotency keys


@pytest.mark.slow
def test_a_running_worker_finishes_a_demo_killed_during_its_hold(tmp_path: Path) -> None:
    worker = subprocess.Popen(
        command("worker", "--interval", "0.1", "--json"),
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        demo = subprocess.Popen(
            # the hold is long enough for two CLI checks of a loaded machine to see it
            command("demo", "--approve", "--hold", "8", "--thread", "w"),
            cwd=tmp_path,
            env=env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert demo.stdout is not None and "refund agent" in demo.stdout.readline()
        deadline = time.monotonic() + 60
        while af(tmp_path, "show", "w", check=False).returncode != 0 or (
            af_json(tmp_path, "show", "w")["status"] != "waiting"
        ):
            assert time.monotonic() < deadline
        demo.send_signal(signal.SIGKILL)
        demo.wait(timeout=10)
        while af_json(tmp_path, "show", "w")["status"] != "done":
            assert time.monotonic() < deadline, "the worker did not finish the run"
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=20)
    assert worker.returncode == 0
    passes = [json.loads(line) for line in out.splitlines()]
    assert [r["thread"] for p in passes for r in p["resumed"]] == ["w"]
