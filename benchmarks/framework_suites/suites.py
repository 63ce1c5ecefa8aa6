"""Running a fetched suite once per saver or storage, each in its own pytest process."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from benchmarks.framework_suites.outcomes import Outcomes, read_outcomes

__all__ = [
    "AF_FILES",
    "LANGGRAPH_FILES",
    "LANGGRAPH_QUICK_FILES",
    "REPO",
    "Run",
    "run_suite",
]

REPO: Final = Path(__file__).resolve().parents[2]
#: LangGraph's test files whose tests take a saver (the sync_checkpointer and
#: async_checkpointer fixtures): graphs, interrupts, strict resume, subgraphs,
#: time travel, DeltaChannel, migration, pydantic.
LANGGRAPH_FILES: Final = tuple(
    f"tests/test_{name}.py"
    for name in (
        "checkpoint_migration",
        "delta_channel_exit_mode",
        "delta_channel_fork",
        "delta_channel_parallel_order",
        "delta_channel_subgraph",
        "delta_channel_to_plain",
        "delta_channel_update_state",
        "interrupt_state",
        "interruption",
        "large_cases",
        "large_cases_async",
        "pregel",
        "pregel_async",
        "pydantic",
        "strict_resume",
        "subgraph_persistence",
        "subgraph_persistence_async",
        "time_travel",
        "time_travel_async",
    )
)
#: The quick form CI runs: one file of each kind (the type and resume cases,
#: subgraphs, time travel, DeltaChannel), about a fifth of the tests.
LANGGRAPH_QUICK_FILES: Final = tuple(
    f"tests/test_{name}.py"
    for name in (
        "interruption",
        "pydantic",
        "strict_resume",
        "subgraph_persistence_async",
        "time_travel_async",
        "delta_channel_to_plain",
        "checkpoint_migration",
    )
)
#: Agent Framework's workflow tests (all of them; the plugin marks those that
#: create a storage).
AF_FILES: Final = ("tests/workflow",)


@dataclass(frozen=True)
class Run:
    """One pytest process of a suite against one saver or storage."""

    suite: str
    saver: str
    outcomes: Outcomes
    returncode: int

    def ran_nothing(self) -> str | None:
        """Why this run is no run at all (pytest stopped before any test: a conftest
        that cannot import, a collection error), or None: a suite that tested
        nothing must not pass for one that passed."""
        if self.outcomes.by_nodeid:
            return None
        return (
            f"{self.suite} against {self.saver}: pytest exited {self.returncode} "
            "before running any test (a conftest or collection error: is every package "
            "the suite imports installed?)"
        )

    @property
    def counted(self) -> dict[str, str]:
        """Outcome per test id, of the tests this run is about (for Agent
        Framework's suite: those that created a storage)."""
        outcomes = self.outcomes.by_nodeid
        only = self.outcomes.extra.get("storage_tests")
        if only is None:
            return outcomes
        return {nodeid: out for nodeid, out in outcomes.items() if nodeid in set(only)}


def run_suite(
    *,
    suite: str,
    saver: str,
    python: str,
    cwd: Path,
    plugin: str,
    option: str,
    targets: Sequence[str],
    env: dict[str, str] | None = None,
) -> Run:
    """``pytest targets`` in ``cwd`` with ``plugin`` set to ``saver``; its outcomes."""
    with tempfile.TemporaryDirectory(prefix="agentflow-suite-") as scratch:
        path = Path(scratch) / "outcomes.json"
        argv = [
            python, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider",
            "-o", "addopts=", "-o", "asyncio_default_fixture_loop_scope=function",
            "-p", plugin, f"{option}={saver}", f"--agentflow-outcomes={path}",
        ]  # fmt: skip
        environment = {**os.environ, "NO_DOCKER": "true", **(env or {})}
        paths = [str(REPO / "src"), str(REPO), environment.get("PYTHONPATH", "")]
        environment["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        done = subprocess.run(
            argv, cwd=cwd, env=environment, stdout=subprocess.DEVNULL, check=False
        )
        return Run(suite, saver, read_outcomes(path), done.returncode)
