"""Every ``--graph`` that gives no graph is one line on stderr and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.support import af


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("json:dumps", "--graph json:dumps needs arguments (obj)"),
        ("samples.approval:main", "--graph samples.approval:main is an async function"),
        ("tests.cli.bad_graphs:raises", "calling it raised RuntimeError: the factory is broken"),
        (
            "tests.cli.raising_module:graph",
            "importing tests.cli.raising_module raised ZeroDivisionError",
        ),
        ("tests.cli.bad_graphs:async_factory", "is an async function"),
        ("tests.cli.bad_graphs:returns_coroutine", "returned an awaitable"),
        ("tests.cli.bad_graphs:needs_arguments", "needs arguments (name, size)"),
        ("tests.cli.bad_graphs:NOT_A_GRAPH", "gives a dict, not an agentflow Graph"),
        ("tests.cli.bad_graphs:returns_invalid", "has no edge from START"),
        ("tests.cli.bad_graphs:duplicate_of_demo", "as the built-in demo does"),
        ("tests.cli.bad_graphs:missing", "module tests.cli.bad_graphs has no 'missing'"),
        ("no_such_module_here:graph", "cannot import no_such_module_here"),
        ("nocolon", "--graph takes MODULE:ATTR, got 'nocolon'"),
    ],
)
def test_a_bad_graph_spec_is_one_line_and_exit_2(demo_store: Path, spec: str, needle: str) -> None:
    done = af(demo_store, "--graph", spec, "resume", "t", "--value", '"approve"', check=False)
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr
    assert "Traceback" not in done.stderr and "never awaited" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""


@pytest.mark.parametrize("spec", ["json:dumps", "tests.cli.raising_module:graph"])
@pytest.mark.parametrize("command", [("threads",), ("show", "t"), ("journal", "t")])
def test_every_command_refuses_a_bad_graph_spec(
    demo_store: Path, spec: str, command: tuple[str, ...]
) -> None:
    done = af(demo_store, "--graph", spec, *command, check=False)
    assert done.returncode == 2, done.stderr
    assert spec.partition(":")[0] in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


def test_the_same_spec_twice_is_one_graph(demo_store: Path) -> None:
    spec = "tests.runtime.graphs:approval_graph"
    done = af(demo_store, "--graph", spec, "--graph", spec, "worker", "--once")
    assert done.stdout.strip() == "nothing due"
