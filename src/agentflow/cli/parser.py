"""The ``agentflow`` argument parser.

Every number a flag takes is checked here, by one rule per kind (a page
size, a step, a count, a duration), so ``threads --limit 0`` fails the way
``--limit 100000`` does: at parse time, as a usage error (exit 2).
"""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Callable
from typing import TypeVar, get_args

from agentflow import __version__
from agentflow.checkpoint.base import ThreadStatus
from agentflow.checkpoint.stores import DEFAULT_STORE
from agentflow.checkpoint.validation import MAX_PAGE

__all__ = ["DECISIONS", "DECISION_HELP", "STATUSES", "build_parser"]

STATUSES = list(get_args(ThreadStatus))
#: What an operator may decide about an ambiguous call (``agentflow reconcile``), and
#: what each one does.
DECISION_HELP = {
    "defer": "decide later: the run keeps waiting as reconciliation_required",
    "retry": "make the call again (attempt + 1): only when a second call is harmless, or "
    "you know the first one did not act",
    "replay_success": "the call did act: record what it returned (--receipt JSON) and go on "
    "as if its reply had arrived",
    "record_failure": "the call did not act: record a failure (--error-code, --message); the "
    "node gets CallFailed",
    "abort": "end the run as failed, the outcome of the call left unknown and kept on record",
}
DECISIONS = list(DECISION_HELP)
#: The most runs one worker or copy drives at once.
MAX_CONCURRENCY = 256
N = TypeVar("N", int, float)


def _number(
    kind: type[N], what: str, low: N, high: N | None = None, *, low_allowed: bool = True
) -> Callable[[str], N]:
    """An argparse type: a finite ``kind`` from ``low`` (or above it) to ``high``."""
    unit = "a whole number" if kind is int else "a number of seconds"

    def parse(text: str) -> N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be {unit}, got {text!r}") from None
        below = value < low if low_allowed else value <= low
        if below or (high is not None and value > high) or not math.isfinite(value):
            if high is not None:
                bounds = f"from {low} to {high}"
            else:
                bounds = f"at least {low:g}" if low_allowed else f"more than {low:g}"
            raise argparse.ArgumentTypeError(f"{what} must be {bounds}, got {text}")
        return value

    return parse


def _non_empty(what: str) -> Callable[[str], str]:
    """An argparse type: a string that is not empty (an empty id is a mistake, not a default)."""

    def parse(text: str) -> str:
        if not text:
            raise argparse.ArgumentTypeError(f"{what} must not be empty")
        return text

    return parse


THREAD = _non_empty("a thread id")
PAGE_SIZE = _number(int, "the page size", 1, MAX_PAGE)
STEP = _number(int, "a step", 0, 2**63 - 1)
ATTEMPT = _number(int, "the attempt", 1, 2**53 - 1)
CONCURRENCY = _number(int, "the concurrency", 1, MAX_CONCURRENCY)
HOLD = _number(float, "--hold", 0.0)
INTERVAL = _number(float, "--interval", 0.0, low_allowed=False)
PORT = _number(int, "the port", 0, 65535)


def _common() -> argparse.ArgumentParser:
    """Options every subcommand takes, before or after its name."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        help=f"store URL (default: $AGENTFLOW_STORE or {DEFAULT_STORE})",
    )
    common.add_argument(
        "--namespace",
        default=argparse.SUPPRESS,
        help="tenant namespace ($AGENTFLOW_NAMESPACE); not empty",
    )
    common.add_argument(
        "--graph",
        action="append",
        default=argparse.SUPPRESS,
        metavar="MODULE:ATTR",
        help="register a graph for resume/fork/worker (repeatable; $AGENTFLOW_GRAPHS)",
    )
    common.add_argument(
        "--keys-file",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help="sealing key spec (JSON; default $AGENTFLOW_SEALING_KEYS): stores are read and "
        "written sealed",
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
        description=(
            "Durable agent runs: run the demo, inspect, resume, fork, prune, copy, "
            "re-seal (rekey), and settle calls that may have acted (journal, reconcile)."
        ),
        epilog="Start with: agentflow demo",
    )
    parser.add_argument("--version", action="version", version=f"agentflow {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, text: str, epilog: str | None = None) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            parents=[common],
            help=text,
            description=text,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    def thread_argument(p: argparse.ArgumentParser, what: str = "the thread") -> None:
        p.add_argument("thread", type=THREAD, help=f"{what} (its id; see: agentflow threads)")

    p = add("demo", "run the refund-approval agent (no LLM, no network)")
    p.add_argument("--order", default="A-1001", help="order id to refund (default A-1001)")
    p.add_argument("--thread", type=THREAD, help="thread id (default: refund-ORDER-RANDOM)")
    p.add_argument(
        "--hold",
        type=HOLD,
        default=5.0,
        help="seconds of the refund hold timer (default 5)",
    )
    decision = p.add_mutually_exclusive_group()
    decision.add_argument("--approve", action="store_true", help="approve without asking")
    decision.add_argument("--reject", action="store_true", help="reject without asking")

    p = add("threads", "list threads, newest state of each")
    p.add_argument("--status", choices=STATUSES, help="only threads in this status")
    p.add_argument("--limit", type=PAGE_SIZE, default=50, help=f"page size, 1-{MAX_PAGE} (50)")
    p.add_argument("--cursor", help="continue after a previous page")

    p = add("history", "the timeline of a thread, step by step")
    thread_argument(p)

    p = add("show", "one checkpoint: status, pending question, state")
    thread_argument(p)
    p.add_argument("--step", type=STEP, help="step to show (default: latest)")

    p = add("diff", "what changed in state between two steps")
    thread_argument(p)
    p.add_argument("a", type=STEP, help="the step to compare from")
    p.add_argument("b", type=STEP, help="the step to compare to")

    p = add("resume", "continue a paused, waiting or crashed run")
    thread_argument(p, "the run to continue")
    p.add_argument("--value", help="JSON answer to a human interrupt, e.g. '\"approve\"'")
    p.add_argument("--wait", action="store_true", help="wait for a timer to come due first")

    p = add("fork", "start a new thread from a past step")
    thread_argument(p, "the thread to fork from")
    p.add_argument("step", type=STEP, help="the step the new thread starts from")
    p.add_argument("--to", type=THREAD, help="new thread id (default: THREAD-fork-RANDOM)")
    p.add_argument("--update", help="JSON object folded into the forked state; re-routes")
    p.add_argument(
        "--keep-route", action="store_true", help="with --update, keep the stored next nodes"
    )

    p = add("prune", "delete old checkpoints of a thread (the latest is kept)")
    thread_argument(p)
    p.add_argument("--before-step", type=STEP, help="delete steps below N")
    p.add_argument(
        "--older-than", help="delete checkpoints written before this ISO time (no offset: UTC)"
    )
    p.add_argument(
        "--include-latest",
        action="store_true",
        help="may delete the latest checkpoint too (then the thread goes whole: its record "
        "and events with it; refused while a process holds its lease)",
    )

    p = add("delete", "delete a thread whole: its checkpoints, its durable record, its events")
    thread_argument(p, "the thread to delete")
    p.add_argument(
        "--force",
        action="store_true",
        help="delete even while a process holds the thread's lease (that process then fails, "
        "maybe after a call it made went out)",
    )

    p = add("journal", "a thread's journaled external calls, their states, and what waits")
    thread_argument(p)

    p = add("events", "a run's lifecycle events, read from the store's event log in order")
    thread_argument(p, "the run whose events to read")
    p.add_argument(
        "--follow", action="store_true", help="keep reading new events as they come (Ctrl-C stops)"
    )
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=1.0,
        help="with --follow, seconds between two reads of the log (default 1)",
    )

    decisions = "\n".join(
        textwrap.fill(text, 78, initial_indent=f"  {name:<15} ", subsequent_indent=" " * 18)
        for name, text in DECISION_HELP.items()
    )
    p = add(
        "reconcile",
        "record a decision on a call that may have acted (ambiguous)",
        epilog=f"decisions:\n{decisions}\n\nthen continue the run with: agentflow resume THREAD",
    )
    thread_argument(p, "the thread whose call is ambiguous")
    p.add_argument("operation", help="the ambiguous operation id (see: agentflow journal THREAD)")
    p.add_argument(
        "--attempt",
        type=ATTEMPT,
        required=True,
        help="the attempt of the call you decide about (agentflow journal THREAD shows it): "
        "a decision about another attempt is refused",
    )
    p.add_argument(
        "--decision", required=True, choices=DECISIONS, help="what to do with it (see below)"
    )
    p.add_argument(
        "--receipt", help="with replay_success: JSON the call returned (a result or response)"
    )
    p.add_argument("--error-code", help="with record_failure or abort: the error code to record")
    p.add_argument("--message", help="with record_failure or abort: the error message")

    p = add("worker", "resume every run whose timer is due")
    p.add_argument("--once", action="store_true", help="scan once and exit")
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=1.0,
        help="seconds between scans (default 1)",
    )
    p.add_argument("--concurrency", type=CONCURRENCY, default=4, help="runs resumed at once (4)")
    p.add_argument(
        "--recover",
        action="store_true",
        help="also take over runs whose process died (their lease lapsed)",
    )
    p.add_argument(
        "--worker-id",
        help="a stable identity: started again under it, the worker takes back at once the "
        "runs it held (one live process per identity; $AGENTFLOW_WORKER_ID)",
    )

    p = add(
        "ui",
        "serve the operator's console: a local web page over the store",
        epilog="open the URL it prints (it carries the launch's token); Ctrl-C stops it",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=PORT, default=8765, help="port to listen on; 0 picks one (8765)")
    p.add_argument(
        "--read-only", action="store_true", help="show everything, offer no action, accept no write"
    )

    p = add("rekey", "re-seal every record with the current sealing key (online, resumable)")
    p.add_argument(
        "--state",
        metavar="PATH",
        help="keep the resume token here; a run cut short goes on from it (removed when done)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--check", action="store_true", help="write nothing; report records not on the current key"
    )
    mode.add_argument(
        "--plain",
        action="store_true",
        help="without keys: re-put every record (moves records older than the integrity "
        "envelope into it)",
    )
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=2.0,
        help="seconds between progress lines (off a terminal) and state saves (default 2)",
    )

    p = add("copy", "copy threads from one store to another (resumable, verified)")
    p.add_argument("source", metavar="SRC_URL", help="store to read (never created)")
    p.add_argument("destination", metavar="DST_URL", help="store to write (created if needed)")
    p.add_argument(
        "--thread", action="append", type=THREAD, help="copy only this thread (repeatable)"
    )
    p.add_argument(
        "--to-namespace",
        metavar="NS",
        help="write into this namespace (default: the one read, --namespace)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace threads that differ at the destination (never one that is ahead of "
        "the source: see --overwrite-newer)",
    )
    p.add_argument(
        "--overwrite-newer",
        action="store_true",
        help="replace even threads the destination holds ahead of the source (more or newer "
        "checkpoints, a later record): what it holds beyond the source is lost",
    )
    p.add_argument("--concurrency", type=CONCURRENCY, default=8, help="threads copied at once (8)")
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=5.0,
        help="seconds between progress lines on stderr when it is not a terminal (default 5)",
    )
    return parser
