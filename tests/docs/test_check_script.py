"""``scripts/check`` (the README's test command, and CI's) runs every step, even
after one failed: a flaky test must not hide the Agent Framework line's result.

The script runs here on stand-ins (a venv whose tools record their call and
exit as told, the CI steps likewise), in a copy of its directory layout."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

from tests.docs.test_examples import ROOT

#: A stand-in tool: records its name and arguments, and fails when they start with $FAIL.
STAND_IN = """#!/usr/bin/env bash
line="$(basename "$0") $*"
echo "$line" >> "$CALLS"
if [ -n "$FAIL" ] && [[ "$line" == "$FAIL"* ]]; then exit 1; fi
exit 0
"""


def _stand_in(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STAND_IN)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _layout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "check", repo / "scripts" / "check")
    for name in ("agent_framework_compat.sh", "langgraph_suite.sh"):
        _stand_in(repo / ".ci" / name)
    for tool in ("python", "ruff", "mypy", "pyright"):
        _stand_in(repo / ".venv" / "bin" / tool)
    return repo


def _check(repo: Path, fail: str) -> tuple[int, str, list[str]]:
    calls = repo / "calls.txt"
    variables = {**os.environ, "CALLS": str(calls), "FAIL": fail, "MONGODB_URI": "mongodb://x"}
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "check")],
        env=variables,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return done.returncode, done.stdout, calls.read_text().splitlines()


def test_a_failing_test_run_leaves_every_later_step_running(tmp_path: Path) -> None:
    repo = _layout(tmp_path)
    status, out, calls = _check(repo, fail="python -m pytest")
    assert status == 1
    assert any(call.startswith("python -m pytest -n ") for call in calls)
    assert "langgraph_suite.sh " in calls and "agent_framework_compat.sh " in calls
    assert "== FAILED: [pytest]" in out


def test_every_step_passing_exits_0_and_a_failed_gate_is_named(tmp_path: Path) -> None:
    repo = _layout(tmp_path)
    status, out, calls = _check(repo, fail="")
    assert status == 0 and "== every step passed" in out
    status, out, calls = _check(repo, fail="mypy")
    assert status == 1 and "[mypy --strict src tests benchmarks]" in out
    assert "agent_framework_compat.sh " in calls  # the rest still ran
