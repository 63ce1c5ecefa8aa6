"""One PostgreSQL database, one namespace, three frameworks: the agentflow command sees them all.

An agentflow runtime run, a LangGraph graph (AgentflowSaver) and an Agent
Framework workflow (AgentflowCheckpointStorage) each pause on a human in one
namespace of one fresh database. The command line, run as a subprocess,
lists all three as interrupted, shows each one's history, and copies them to
another backend and namespace, where each resumes and finishes: the runtime
run through ``agentflow resume``, the other two through their frameworks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.backends.postgres import DSN, admin_connection
from tests.integrations import three_frameworks as three

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "tenant-42"
GRAPH = "tests.integrations.three_frameworks:refund_graph"


@pytest.fixture
async def database() -> AsyncIterator[str]:
    """The URL of a fresh database, dropped afterwards."""
    admin = await admin_connection()
    name = f"af_three_{uuid.uuid4().hex[:12]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(DSN)._replace(path=f"/{name}").geturl()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def agentflow(*args: str) -> Any:
    """Run ``agentflow --json ARGS`` in a fresh interpreter; its parsed output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLOW_")}
    done = subprocess.run(
        [sys.executable, "-m", "agentflow", "--json", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"agentflow {' '.join(args)}:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout)


async def test_threads_history_and_copy_show_and_move_all_three(
    database: str, tmp_path: Path
) -> None:
    await three.pause_all(database, NAMESPACE)
    where = ["--store", database, "--namespace", NAMESPACE]

    listed = agentflow(*where, "threads")["threads"]
    status = {t["thread"]: t["status"] for t in listed}
    assert {three.RUNTIME_THREAD, three.LANGGRAPH_THREAD, three.AF_THREAD} <= set(status)
    waiting = agentflow(*where, "threads", "--status", "interrupted")["threads"]
    assert [t["thread"] for t in waiting] == sorted(
        [three.RUNTIME_THREAD, three.LANGGRAPH_THREAD, three.AF_THREAD]
    )

    runtime = agentflow(*where, "history", three.RUNTIME_THREAD)
    assert [s["step"] for s in runtime] == [0, 1, 2]
    assert runtime[-1]["interrupt_payload"]["question"] == "refund order A-1?"
    langgraph = agentflow(*where, "history", three.LANGGRAPH_THREAD)
    assert langgraph[-1]["status"] == "interrupted" and len(langgraph) > 2
    workflow = agentflow(*where, "history", three.AF_THREAD)
    assert [(s["step"], s["status"]) for s in workflow] == [
        (0, "running"),
        (1, "running"),
        (2, "interrupted"),
    ]
    assert [s["event"] for s in workflow][1] == "ran drafter"
    assert workflow[-1]["interrupt_node"] == "approver"
    assert workflow[-1]["interrupt_payload"]["question"] == "1 pending request: ApprovalRequest"

    copy = f"sqlite:///{tmp_path / 'moved.db'}"
    report = agentflow("--namespace", NAMESPACE, "copy", database, copy, "--to-namespace", "moved")
    assert report["verified"] and report["copied"] == len(listed) and report["refused"] == []

    moved = ["--store", copy, "--namespace", "moved"]
    resumed = agentflow(
        *moved, "--graph", GRAPH, "resume", three.RUNTIME_THREAD, "--value", '"yes"'
    )
    assert resumed["status"] == "done" and resumed["state"]["approved"] is True
    finished = await three.resume_all(copy, "moved")
    assert finished == {
        "langgraph": ["draft", "approve", "publish:yes"],
        "agent_framework": ["budget:600:approve|drafted budget|drafts=1"],
    }
    after = {t["thread"]: t["status"] for t in agentflow(*moved, "threads")["threads"]}
    assert {after[t] for t in (three.RUNTIME_THREAD, three.LANGGRAPH_THREAD, three.AF_THREAD)} == {
        "done"
    }
    source = agentflow(*where, "threads", "--status", "interrupted")["threads"]
    assert len(source) == 3  # the copy moved them; the source is as it was
