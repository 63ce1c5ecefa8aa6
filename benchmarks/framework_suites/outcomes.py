"""One outcome per test, under its node id.

Runs compare by node id: the LangGraph plugin runs the stock SQLite saver and
ours in the same parameter slot, so both name each test the same way. A
test's outcome is ``failed`` when any phase (setup, call, teardown) failed,
else ``passed`` or ``skipped`` as its call was.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["OutcomeRecorder", "Outcomes", "read_outcomes"]


class OutcomeRecorder:
    """A pytest plugin object that writes the run's outcomes as JSON at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.nodeids: set[str] = set()  # the tests this run is about, filled at collection
        self.outcomes: dict[str, str] = {}
        self.extra: dict[str, Any] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.nodeids:
            return
        if report.failed:
            self.outcomes[report.nodeid] = "failed"
        elif report.when == "call" or (report.when == "setup" and report.skipped):
            self.outcomes.setdefault(report.nodeid, "skipped" if report.skipped else "passed")

    def pytest_sessionfinish(self) -> None:
        body = {"outcomes": self.outcomes, **self.extra}
        self.path.write_text(json.dumps(body, indent=0, sort_keys=True))


@dataclass
class Outcomes:
    """What one run recorded: outcome per node id, and what its plugin added."""

    by_nodeid: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def read_outcomes(path: Path) -> Outcomes:
    """The outcomes a run wrote (empty when it wrote none: it did not get that far)."""
    if not path.exists():
        return Outcomes()
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold outcomes")
    extra = {k: v for k, v in data.items() if k != "outcomes"}
    return Outcomes(dict(data.get("outcomes", {})), extra)
