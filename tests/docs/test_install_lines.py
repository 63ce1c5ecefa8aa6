"""Every install line in the docs and in the package's messages installs this project.

On the package index, ``agentflow`` is an unrelated project: ``pip install
'agentflow[sealing]'`` installs it and answers that it "does not provide the
extra". This distribution is named in pyproject.toml (the import name stays
``agentflow``); a line that installs it names that distribution, or ``.`` from
a clone, and only extras pyproject.toml defines.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME: str = PROJECT["name"]
EXTRAS = set(PROJECT["optional-dependencies"])
#: Where install lines are written for people: the docs, and every message the package prints.
SOURCES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "src").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.py"),
        *(ROOT / "samples").rglob("*.py"),
        ROOT / "scripts" / "check",
        *(ROOT / ".ci").iterdir(),
    ]
)
#: ``pip install 'agentflow[x]'``, ``pip install agentflow``, and ``agentflow[x]`` written alone.
WRONG = re.compile(r"pip install\s+(-\S+\s+)*['\"]?agentflow(?![-_\w])|(?<![-\w.])agentflow\[")
#: A requirement of this project with extras: ``NAME[a,b]``, or ``-e '.[a,b]'`` from a clone.
WITH_EXTRAS = re.compile(rf"(?<![-\w]){re.escape(NAME)}\[([-\w, ]+)\]|-e\s+['\"]?\.\[([-\w, ]+)\]")

#: The extras ``all`` must name: every one but the benchmark and development tools.
_ALL_OF = EXTRAS - {"all", "benchmark", "dev"}


def test_the_distribution_is_not_the_unrelated_agentflow_on_the_index() -> None:
    assert NAME != "agentflow" and NAME.startswith("agentflow")
    assert PROJECT["optional-dependencies"]["all"] == [
        f"{NAME}[{','.join(e for e in PROJECT['optional-dependencies'] if e in _ALL_OF)}]"
    ]


def _found(pattern: re.Pattern[str]) -> list[tuple[str, re.Match[str]]]:
    """Every match of ``pattern`` in the sources, with where it is (``path:line``)."""
    found = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{path.relative_to(ROOT)}:{line}", match))
    return found


def test_no_line_installs_the_unrelated_agentflow() -> None:
    wrong = [f"{where}: {match.group(0)}" for where, match in _found(WRONG)]
    assert not wrong, "\n".join(wrong)


def test_every_extra_named_exists() -> None:
    named = [(where, m.group(1) or m.group(2)) for where, m in _found(WITH_EXTRAS)]
    assert len(named) >= 5  # the docs and hints do name extras: the pattern sees them
    unknown = [
        f"{where}: {extra.strip()}"
        for where, extras in named
        for extra in extras.split(",")
        if extra.strip() not in EXTRAS
    ]
    assert not unknown, "\n".join(unknown)


def test_the_checks_see_a_wrong_line() -> None:
    for line in [
        "pip install 'agentflow[sealing]'",
        "pip install agentflow",
        'pip install -q "agentflow[ui]"',
        "Install `agentflow[langgraph]` and the backend's extra",
    ]:
        assert WRONG.search(line), line
    for line in [
        f"pip install '{NAME}[sealing]'",
        "pip install -e '.[sealing]'",
        "import agentflow.checkpoint",
        "pip install agentflow-durable",
    ]:
        assert not WRONG.search(line), line
