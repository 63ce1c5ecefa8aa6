"""The Agent Framework plugin, on a small suite of its own: the framework's storages
are replaced by ours wherever a test builds one, and the tests that do are counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks.framework_suites.suites import REPO

from tests.backends import postgres
from tests.support.mongod import mongodb_uri

SUITE = """
import dataclasses

import agent_framework
from agent_framework import FileCheckpointStorage, InMemoryCheckpointStorage, WorkflowCheckpoint


@dataclasses.dataclass
class Note:
    text: str


def _checkpoint(**fields):
    return WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="g", **fields)


async def test_memory_storage_is_ours():
    storage = InMemoryCheckpointStorage()
    assert type(storage).__name__ == EXPECTED and isinstance(storage, InMemoryCheckpointStorage)
    saved = _checkpoint(state={"note": Note("listed by the plugin")})
    await storage.save(saved)
    assert (await storage.load(saved.checkpoint_id)).state == saved.state


async def test_two_file_storages_on_one_folder_share_it(tmp_path):
    first, second = FileCheckpointStorage(tmp_path), FileCheckpointStorage(tmp_path)
    saved = _checkpoint()
    await first.save(saved)
    assert (await second.get_latest(workflow_name="wf")).checkpoint_id == saved.checkpoint_id
    assert await FileCheckpointStorage(tmp_path / "other").get_latest(workflow_name="wf") is None


async def test_a_late_import_is_ours_too():
    from agent_framework import InMemoryCheckpointStorage as Late

    assert type(Late()).__name__ == EXPECTED
    assert type(agent_framework.InMemoryCheckpointStorage()).__name__ == EXPECTED


def test_without_a_storage():
    assert True
"""
EXPECTED = {
    "stock": "InMemoryCheckpointStorage",
    "sqlite": "AgentflowCheckpointStorage",
    "postgres": "AgentflowCheckpointStorage",
    "mongodb": "_FirstName",
}


@pytest.mark.parametrize("storage", sorted(EXPECTED))
def test_the_plugin_swaps_the_framework_storages(tmp_path: Path, storage: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    if storage == "mongodb":
        env["MONGODB_URI"] = mongodb_uri()
    if storage == "postgres":
        env["AGENTFLOW_POSTGRES_DSN"] = postgres.DSN
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_suite.py").write_text(f"EXPECTED = {EXPECTED[storage]!r}\n{SUITE}")
    outcomes = tmp_path / "outcomes.json"
    argv = [
        sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider",
        "-o", "asyncio_mode=auto", "-p", "benchmarks.framework_suites.agent_framework_plugin",
        f"--agentflow-storage={storage}", f"--agentflow-outcomes={outcomes}",
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    recorded = json.loads(outcomes.read_text())
    names = {nodeid.split("::")[-1] for nodeid in recorded["storage_tests"]}
    assert names == {
        "test_memory_storage_is_ours",
        "test_two_file_storages_on_one_folder_share_it",
        "test_a_late_import_is_ours_too",
    }
    assert sorted(recorded["outcomes"].values()) == ["passed"] * 4
