"""Exit statuses and argument checks are the same everywhere."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli.support import af, af_here, command, env


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["threads", "--limit", "0"], "the page size must be from 1 to 10000, got 0"),
        (["threads", "--limit", "-1"], "the page size must be from 1 to 10000, got -1"),
        (["threads", "--limit", "100000"], "the page size must be from 1 to 10000, got 100000"),
        (["threads", "--limit", "ten"], "the page size must be a whole number"),
        (["show", "t", "--step", "-1"], "a step must be from 0"),
        (["diff", "t", "0", "-2"], "a step must be from 0"),
        (["prune", "t", "--before-step", "-5"], "a step must be from 0"),
        (["worker", "--once", "--concurrency", "0"], "the concurrency must be from 1 to 256"),
        (["worker", "--interval", "0"], "--interval must be more than 0"),
        (["worker", "--interval", "nan"], "--interval must be more than 0"),
        (["demo", "--hold", "-1"], "--hold must be at least 0"),
        (["copy", "sqlite:///a.db", "sqlite:///b.db", "--concurrency", "9999"], "from 1 to 256"),
    ],
)
def test_numbers_are_checked_by_one_rule_each_as_usage_errors(
    demo_store: Path,
    args: list[str],
    needle: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(demo_store)
    status, out = af_here(capsys, *args)
    assert status == 2 and needle in out, out
    assert "Traceback" not in out


def test_an_empty_namespace_is_refused_not_defaulted(demo_store: Path) -> None:
    for args in (["--namespace", "", "threads"], ["threads", "--namespace", ""]):
        done = af(demo_store, *args, check=False)
        assert done.returncode == 2
        assert done.stderr.strip() == (
            "agentflow: error: --namespace must not be empty; omit it for the default namespace"
        )


def test_prune_without_bounds_names_the_flags(demo_store: Path) -> None:
    done = af(demo_store, "prune", "t", check=False)
    assert done.returncode == 2
    assert "--before-step N, --older-than TIME" in done.stderr
    assert "before_step" not in done.stderr and "older_than" not in done.stderr


def test_ctrl_c_on_a_worker_exits_130_and_sigterm_exits_0(tmp_path: Path) -> None:
    for signum, status in ((signal.SIGINT, 130), (signal.SIGTERM, 0)):
        worker = subprocess.Popen(
            command("worker", "--interval", "0.1"),
            cwd=tmp_path,
            env=env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert worker.stdout is not None and "worker polling" in worker.stdout.readline()
        time.sleep(0.3)
        worker.send_signal(signum)
        assert worker.wait(timeout=20) == status


def test_ctrl_c_on_a_command_exits_130(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        command("demo", "--approve", "--hold", "30", "--thread", "c"),
        cwd=tmp_path,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert demo.stdout is not None
    while "waiting" not in demo.stdout.readline():
        pass
    demo.send_signal(signal.SIGINT)
    assert demo.wait(timeout=20) == 130
    assert demo.stderr is not None and "Traceback" not in demo.stderr.read()
