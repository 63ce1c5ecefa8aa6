"""The top level of the ``agentflow`` command: run a subcommand, report how it ended.

No failure prints a traceback (``AGENTFLOW_DEBUG=1`` shows it instead).
Every error is one line on stderr, ``agentflow: error: ...`` (or
``{"error": CODE, "message": ...}`` with ``--json``), shown inert, and the
exit status says what kind of failure it was (:mod:`agentflow.cli.errors`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

from rich.console import Console

from agentflow.checkpoint.stores import local_path, without_passwords
from agentflow.cli import commands, records, run_commands
from agentflow.cli.copy_command import copy
from agentflow.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, exit_status
from agentflow.cli.keys import keyring_from_args
from agentflow.cli.parser import build_parser
from agentflow.cli.rekey_command import rekey
from agentflow.cli.render import dump_json
from agentflow.cli.session import Session, StoreTarget, command_line, open_cli_store
from agentflow.cli.text import inert
from agentflow.errors import AgentflowError, CheckpointConflict, StoreNotFound, StoreUnavailable
from agentflow.runtime import NodeFailed, NotDue, StepClaimed
from agentflow.ui.command import ui

__all__ = ["build_parser", "main"]

Command = Callable[[Session], Awaitable[int]]
#: What a command may create: the store, or nothing.
Creates = Literal["store", "nothing"]
#: Subcommands on one store. Only those that start runs may create the store;
#: every other one refuses a store that is not there.
COMMANDS: dict[str, tuple[Command, Creates]] = {
    "threads": (commands.threads, "nothing"),
    "history": (commands.history, "nothing"),
    "show": (commands.show, "nothing"),
    "diff": (commands.diff, "nothing"),
    "prune": (commands.prune, "nothing"),
    "delete": (commands.delete, "nothing"),
    "journal": (records.journal, "nothing"),
    "reconcile": (records.reconcile, "nothing"),
    "resume": (run_commands.resume, "nothing"),
    "fork": (run_commands.fork, "nothing"),
    "worker": (run_commands.worker, "store"),
    "demo": (run_commands.demo, "store"),
    "ui": (ui, "nothing"),
}


def _target(args: argparse.Namespace) -> StoreTarget:
    return StoreTarget.from_args(getattr(args, "store", None), getattr(args, "namespace", None))


async def _run(args: argparse.Namespace, console: Console) -> int:
    if args.command == "copy":
        return await copy(args, console)
    if args.command == "rekey":
        return await rekey(args)
    handler, creates = COMMANDS[args.command]
    target = _target(args)
    store = open_cli_store(target, create=creates == "store", sealing=keyring_from_args(args))
    session = Session(args, store, console, target)
    try:
        if session.graph_specs:  # a bad --graph fails every command, not only those that run
            _ = session.registry
        return await handler(session)
    finally:
        await store.close()


#: What to do about a store that is not there (only demo and worker create one).
_NO_STORE_HINT = (
    "; a run creates it (agentflow demo), or name another with --store or $AGENTFLOW_STORE"
)


def _hint(args: argparse.Namespace, exc: BaseException) -> str:
    """What to do next, from the error's own fields."""
    if isinstance(exc, StoreNotFound):
        return "" if args.command == "copy" else _NO_STORE_HINT
    thread = getattr(exc, "thread", None)
    if not isinstance(thread, str) or args.command == "copy":
        return ""
    try:
        target = _target(args)
    except AgentflowError:
        return ""
    show = command_line(args, target, "show", thread)
    if isinstance(exc, NotDue):
        return f"; to wait for it: {command_line(args, target, 'resume', thread, '--wait')}"
    if isinstance(exc, StepClaimed):
        return f"; see it with: {show}"
    if isinstance(exc, CheckpointConflict):
        return f"; another process stored this step first: {show}"
    if isinstance(exc, NodeFailed):
        return "; AGENTFLOW_DEBUG=1 shows the node's exception"
    return ""


def _where(args: argparse.Namespace) -> str:
    """Which store could not be reached, without its password."""
    if args.command == "copy":
        return "one of the stores"
    try:
        target = _target(args)
    except AgentflowError:
        return "the store"
    return f"the {target.scheme} store at {target.where}"


def _is_local(args: argparse.Namespace) -> bool:
    """Whether the command's store is a path (its errors name it already)."""
    try:
        return args.command != "copy" and local_path(_target(args).url) is not None
    except AgentflowError:
        return False


def _message(args: argparse.Namespace, exc: BaseException) -> str:
    message = str(exc) or type(exc).__name__
    if isinstance(exc, StoreUnavailable):
        message = f"cannot reach {_where(args)} (agentflow {args.command}): {message}"
    elif isinstance(exc, StoreNotFound) and not _is_local(args):
        message = f"{message} (in {_where(args)})"
    message += _hint(args, exc)
    urls = (getattr(args, flag, None) for flag in ("store", "source", "destination"))
    return inert(without_passwords(message, [url for url in urls if isinstance(url, str)]))


def _fail(args: argparse.Namespace, exc: BaseException, code: str, status: int) -> int:
    message = _message(args, exc)
    if getattr(args, "json", False):
        print(dump_json({"error": code, "message": message}).replace("\n", ""), file=sys.stderr)
    else:
        print(f"agentflow: error: {message}", file=sys.stderr)
    return status


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentflow`` console script (and ``python -m agentflow``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        sys.exit(EXIT_OK)
    # With --json, stdout carries only JSON; progress (countdowns) goes to stderr.
    # Markup, emoji codes and highlighting are off: store text is printed as text.
    console = Console(
        stderr=bool(getattr(args, "json", False)), markup=False, emoji=False, highlight=False
    )
    debug = os.environ.get("AGENTFLOW_DEBUG", "") not in ("", "0")
    try:
        status = asyncio.run(_run(args, console))
    except KeyboardInterrupt:
        print("agentflow: interrupted", file=sys.stderr)
        status = EXIT_INTERRUPTED
    except AgentflowError as exc:
        if debug:
            raise
        status = _fail(args, exc, exc.code, exit_status(exc))
    except BrokenPipeError:  # the reader of stdout (`| head`) has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        status = EXIT_OK
    except OSError as exc:
        if debug:
            raise
        status = _fail(args, exc, "os_error", EXIT_FAILED)
    except Exception as exc:  # a bug: still one line, and how to see more
        if debug:
            raise
        bug = RuntimeError(f"unexpected {type(exc).__name__}: {exc}; AGENTFLOW_DEBUG=1 shows where")
        status = _fail(args, bug, "internal_error", EXIT_FAILED)
    sys.exit(status)
