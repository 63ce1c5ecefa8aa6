"""Run a framework's own test suite against the stock savers and ours, and print the tables.

    python -m benchmarks.framework_suites langgraph            # 19 files, default + strict
    python -m benchmarks.framework_suites langgraph --quick    # CI: a subset, ours only
    python -m benchmarks.framework_suites agent-framework --repo PATH_OR_URL \\
        [--framework-version 1.13.0]

``langgraph`` runs LangGraph's graph tests from the installed release's sdist
on the stock in-memory and SQLite savers and on ``AgentflowSaver`` over
SQLite and PostgreSQL (``AGENTFLOW_POSTGRES_DSN``), with
``LANGGRAPH_STRICT_MSGPACK`` off and on. ``--quick`` runs ours only, on a
subset, and runs the stock SQLite saver just on the tests ours failed. The
``agent-framework`` command runs Agent Framework's workflow tests from a
checkout of ``--repo`` at the release's tag, on its built-in storages and on
``AgentflowCheckpointStorage`` (memory, SQLite, PostgreSQL) and
``MongoDBCheckpointStorage`` (``MONGODB_URI``, or a mongod started here).
Both exit non-zero on a difference that ``report.EXPLAINED`` does not
explain. Everything fetched stays in ``--workdir`` (a scratch folder).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benchmarks.framework_suites import report, sources
from benchmarks.framework_suites.suites import (
    AF_FILES,
    LANGGRAPH_FILES,
    LANGGRAPH_QUICK_FILES,
    Run,
    run_suite,
)

_LANGGRAPH_PLUGIN = "benchmarks.framework_suites.langgraph_plugin"
_AF_PLUGIN = "benchmarks.framework_suites.agent_framework_plugin"


def _print_differences(storage_runs: Sequence[tuple[Run, Run]]) -> list[str]:
    """Print every difference of each (stock, ours) pair; return the unexplained ones."""
    unexplained: list[str] = []
    for stock, ours in storage_runs:
        explained, unknown = report.explain(ours.saver, report.differences(stock, ours))
        for line in explained:
            print(f"- {line}")
        for test_id in unknown:
            print(f"- UNEXPLAINED `{test_id}` ({ours.saver}): passes on {stock.saver}")
        unexplained.extend(unknown)
    return unexplained


def _langgraph(args: argparse.Namespace, workdir: Path) -> list[str]:
    root = sources.langgraph_sdist(workdir)
    version = importlib.metadata.version("langgraph")
    files = LANGGRAPH_QUICK_FILES if args.quick else LANGGRAPH_FILES
    unexplained: list[str] = []
    for strict in args.strict:
        env = {"LANGGRAPH_STRICT_MSGPACK": "true" if strict else "false"}
        mode = "strict" if strict else "default"

        def run(saver: str, targets: Sequence[str], env: dict[str, str] = env) -> Run:
            return run_suite(
                suite=f"langgraph {version}", saver=saver, python=args.python, cwd=root,
                plugin=_LANGGRAPH_PLUGIN, option="--agentflow-saver", targets=targets, env=env,
            )  # fmt: skip

        ours = [run(saver, files) for saver in ("sqlite", "postgres")]
        unexplained += [problem for r in ours if (problem := r.ran_nothing()) is not None]
        if args.quick:  # the stock saver only where ours failed: same test ids, same slot
            failed = sorted(
                {n for r in ours for n, o in r.outcomes.by_nodeid.items() if o == "failed"}
            )
            stock = [run("stock-sqlite", failed)] if failed else []
        else:
            stock = [run(saver, files) for saver in ("stock-memory", "stock-sqlite")]
        title = f"LangGraph {version} graph tests" + (" (quick)" if args.quick else "")
        print(report.outcome_table(title, stock, ours, mode).markdown())
        if stock:
            unexplained += _print_differences([(stock[-1], r) for r in ours])
    return unexplained


def _agent_framework(args: argparse.Namespace, workdir: Path) -> list[str]:
    version = args.framework_version or importlib.metadata.version("agent-framework-core")
    core = sources.agent_framework_checkout(args.repo, version, workdir)
    python = sources.framework_python(version, workdir)
    if "mongodb" in args.storages and not os.environ.get("MONGODB_URI"):
        from tests.support.mongod import mongodb_uri  # a mongod for this command's lifetime

        os.environ["MONGODB_URI"] = mongodb_uri()
    runs = {
        storage: run_suite(
            suite=f"agent-framework-core {version}",
            saver=storage,
            python=python,
            cwd=core,
            plugin=_AF_PLUGIN,
            option="--agentflow-storage",
            targets=AF_FILES,
        )
        for storage in args.storages
    }
    stock = [runs["stock"]] if "stock" in runs else []
    ours = [run for storage, run in runs.items() if storage != "stock"]
    missing = [problem for run in runs.values() if (problem := run.ran_nothing()) is not None]
    if missing:
        return missing
    title = f"Agent Framework {version} workflow tests that create a storage"
    print(report.outcome_table(title, stock, ours, "default").markdown())
    return _print_differences([(stock[0], run) for run in ours]) if stock else []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.framework_suites")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder (kept)")
    commands = parser.add_subparsers(dest="suite", required=True)
    langgraph = commands.add_parser("langgraph")
    langgraph.add_argument("--quick", action="store_true")
    langgraph.add_argument(
        "--strict", choices=("off", "on", "both"), default=None,
        help="LANGGRAPH_STRICT_MSGPACK runs (default: both; --quick: off)",
    )  # fmt: skip
    af = commands.add_parser("agent-framework")
    af.add_argument("--repo", default=sources.AF_REPO, help="its URL, or a local clone or mirror")
    af.add_argument("--framework-version", default=None, help="default: the installed release")
    af.add_argument(
        "--storages", default="stock,memory,sqlite,postgres,mongodb",
        type=lambda text: text.split(","),
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.python = sys.executable
    if args.suite == "langgraph":
        choice = args.strict or ("off" if args.quick else "both")
        args.strict = {"off": [False], "on": [True], "both": [False, True]}[choice]
    with tempfile.TemporaryDirectory(prefix="agentflow-suites-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        unexplained = (
            _langgraph(args, workdir)
            if args.suite == "langgraph"
            else (_agent_framework(args, workdir))
        )
    if unexplained:
        for problem in unexplained:
            print(problem)
        print(f"{len(unexplained)} unexplained difference(s)")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
