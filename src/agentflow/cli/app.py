"""The ``agentflow`` argument parser and the top level that runs a subcommand.

Every failure the user can cause (a wrong thread, a bad store URL, a missing
step, a resume that is not due) is an :class:`~agentflow.errors.AgentflowError`
and ends as one line on stderr and exit status 1; ``--json`` makes that line
JSON. ``AGENTFLOW_DEBUG=1`` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from collections.abc import Sequence

from rich.console import Console

from agentflow.cli.commands import COMMANDS, Session
from agentflow.cli.registry import graph_specs_from_env
from agentflow.cli.render import dump_json
from agentflow.cli.stores import DEFAULT_STORE, open_store, safe_url
from agentflow.errors import AgentflowError, CheckpointConflict
from agentflow.runtime import NotDue

__all__ = ["build_parser", "main"]

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130
STATUSES = ["done", "interrupted", "waiting", "running"]


def _common() -> argparse.ArgumentParser:
    """Options every subcommand takes, before or after its name."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        help=f"store URL (default: $AGENTFLOW_STORE or {DEFAULT_STORE})",
    )
    common.add_argument(
        "--namespace", default=argparse.SUPPRESS, help="tenant namespace ($AGENTFLOW_NAMESPACE)"
    )
    common.add_argument(
        "--graph",
        action="append",
        default=argparse.SUPPRESS,
        metavar="MODULE:ATTR",
        help="register a graph for resume/fork/worker (repeatable; $AGENTFLOW_GRAPHS)",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="agentflow",
        parents=[common],
        description="Durable agent runs: run the demo, inspect, resume, fork and prune threads.",
        epilog="Start with: agentflow demo",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], help=text, description=text)

    p = add("demo", "run the refund-approval agent (no LLM, no network)")
    p.add_argument("--order", default="A-1001", help="order id to refund (default A-1001)")
    p.add_argument("--thread", help="thread id (default: refund-ORDER-RANDOM)")
    p.add_argument("--hold", type=float, default=5.0, help="seconds of the refund hold timer")
    decision = p.add_mutually_exclusive_group()
    decision.add_argument("--approve", action="store_true", help="approve without asking")
    decision.add_argument("--reject", action="store_true", help="reject without asking")

    p = add("threads", "list threads, newest state of each")
    p.add_argument("--status", choices=STATUSES, help="only threads in this status")
    p.add_argument("--limit", type=int, default=50, help="page size (default 50)")
    p.add_argument("--cursor", help="continue after a previous page")

    p = add("history", "the timeline of a thread, step by step")
    p.add_argument("thread")

    p = add("show", "one checkpoint: status, pending question, state")
    p.add_argument("thread")
    p.add_argument("--step", type=int, help="step to show (default: latest)")

    p = add("diff", "what changed in state between two steps")
    p.add_argument("thread")
    p.add_argument("a", type=int)
    p.add_argument("b", type=int)

    p = add("resume", "continue a paused, waiting or crashed run")
    p.add_argument("thread")
    p.add_argument("--value", help="JSON answer to a human interrupt, e.g. '\"approve\"'")
    p.add_argument("--wait", action="store_true", help="wait for a timer to come due first")

    p = add("fork", "start a new thread from a past step")
    p.add_argument("thread")
    p.add_argument("step", type=int)
    p.add_argument("--to", help="new thread id (default: THREAD-fork-RANDOM)")
    p.add_argument("--update", help="JSON object folded into the forked state")

    p = add("prune", "delete old checkpoints of a thread")
    p.add_argument("thread")
    p.add_argument("--before-step", type=int, help="delete steps below N")
    p.add_argument("--older-than", help="delete checkpoints written before this ISO time")

    p = add("delete", "delete a thread and all its checkpoints")
    p.add_argument("thread")

    p = add("worker", "resume every run whose timer is due")
    p.add_argument("--once", action="store_true", help="scan once and exit")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between scans")
    p.add_argument("--concurrency", type=int, default=4, help="runs resumed at once")
    return parser


def _prefix(args: argparse.Namespace, specs: list[str]) -> str:
    """``agentflow`` plus the flags a printed follow-up command must repeat."""
    words = ["agentflow"]
    if hasattr(args, "store"):
        words += ["--store", safe_url(args.store)]
    if hasattr(args, "namespace"):
        words += ["--namespace", args.namespace]
    for spec in getattr(args, "graph", []):
        words += ["--graph", spec]
    return shlex.join(words)


async def _run(args: argparse.Namespace, console: Console) -> int:
    url = getattr(args, "store", None) or os.environ.get("AGENTFLOW_STORE") or DEFAULT_STORE
    namespace = getattr(args, "namespace", None) or os.environ.get("AGENTFLOW_NAMESPACE")
    specs = [*graph_specs_from_env(), *getattr(args, "graph", [])]
    store = open_store(url, namespace=namespace)
    try:
        session = Session(args, store, console, _prefix(args, specs), specs)
        return await COMMANDS[args.command](session)
    finally:
        await store.close()


def _fail(args: argparse.Namespace, exc: BaseException, code: str) -> int:
    message = str(exc) or type(exc).__name__
    if isinstance(exc, NotDue):
        message += f"; to wait for it: agentflow resume {shlex.quote(exc.thread)} --wait"
    elif isinstance(exc, CheckpointConflict):
        message += (
            "; another resume took this step first (a crashed one's claim lapses "
            f"after a minute): agentflow show {shlex.quote(exc.thread)}"
        )
    if getattr(args, "json", False):
        print(dump_json({"error": code, "message": message}).replace("\n", ""), file=sys.stderr)
    else:
        print(f"agentflow: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentflow`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return
    # With --json, stdout carries only JSON; progress (countdowns) goes to stderr.
    console = Console(stderr=bool(getattr(args, "json", False)))
    debug = bool(os.environ.get("AGENTFLOW_DEBUG"))
    try:
        status = asyncio.run(_run(args, console))
    except KeyboardInterrupt:
        print("agentflow: interrupted", file=sys.stderr)
        status = EXIT_INTERRUPTED
    except AgentflowError as exc:
        if debug:
            raise
        status = _fail(args, exc, exc.code)
    except OSError as exc:
        if debug:
            raise
        status = _fail(args, exc, "os_error")
    sys.exit(status)
