"""One outcome per test, keyed so that runs against different savers compare.

A fetched suite parametrizes its tests by saver (``test_x[sqlite]``,
``test_x[memory]``); the plugins record each test under its node id and
also under that id with the saver parameter replaced by ``saver``, so the
stock in-memory run and ours name the same test the same way. A test's
outcome is ``failed`` when any phase (setup, call, teardown) failed, else
``passed`` or ``skipped`` as its call was.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["OutcomeRecorder", "Outcomes", "normalized_id", "read_outcomes"]


def normalized_id(nodeid: str, saver_params: Iterable[str]) -> str:
    """``nodeid`` with each saver parameter token in its brackets replaced by ``saver``."""
    name, bracket, params = nodeid.partition("[")
    if not bracket:
        return nodeid
    names = set(saver_params)
    tokens = params[:-1].split("-")
    return f"{name}[{'-'.join('saver' if token in names else token for token in tokens)}]"


class OutcomeRecorder:
    """A pytest plugin object that writes the run's outcomes as JSON at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keys: dict[str, str] = {}  # nodeid -> normalized id, filled at collection
        self.outcomes: dict[str, str] = {}
        self.extra: dict[str, Any] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid not in self.keys:
            return
        if report.failed:
            self.outcomes[report.nodeid] = "failed"
        elif report.when == "call" or (report.when == "setup" and report.skipped):
            self.outcomes.setdefault(report.nodeid, "skipped" if report.skipped else "passed")

    def pytest_sessionfinish(self) -> None:
        body = {"outcomes": self.outcomes, "keys": self.keys, **self.extra}
        self.path.write_text(json.dumps(body, indent=0, sort_keys=True))


@dataclass
class Outcomes:
    """What one run recorded: outcome per node id, and each id's comparable key."""

    by_nodeid: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def by_key(self) -> dict[str, str]:
        return {self.keys.get(nodeid, nodeid): out for nodeid, out in self.by_nodeid.items()}


def read_outcomes(path: Path) -> Outcomes:
    """The outcomes a run wrote (empty when it wrote none: it did not get that far)."""
    if not path.exists():
        return Outcomes()
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold outcomes")
    extra = {k: v for k, v in data.items() if k not in ("outcomes", "keys")}
    return Outcomes(dict(data.get("outcomes", {})), dict(data.get("keys", {})), extra)
