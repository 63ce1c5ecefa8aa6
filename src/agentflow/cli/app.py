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

from agentflow.checkpoint.stores import has_password, local_path, without_passwords
from agentflow.cli import commands, records, run_commands
from agentflow.cli.copy_command import copy
from agentflow.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, exit_status
from agentflow.cli.events_command import events
from agentflow.cli.interrupts import Continuation, interrupt_at_once, repeated_command
from agentflow.cli.keys import keyring_from_args
from agentflow.cli.logs import masked_logs
from agentflow.cli.parser import build_parser
from agentflow.cli.rekey_command import rekey
from agentflow.cli.render import json_line
from agentflow.cli.session import (
    STORE_ENV,
    CliConsole,
    Session,
    StoreTarget,
    command_line,
    hidden_store_note,
    open_cli_store,
)
from agentflow.cli.text import inert
from agentflow.errors import AgentflowError, CheckpointConflict, StoreNotFound, StoreUnavailable
from agentflow.runtime import NodeFailed, NotDue, StepClaimed
from agentflow.ui.command import ui

__all__ = ["build_parser", "main"]

Command = Callable[[Session], Awaitable[int]]
#: What a command may create: the store, or nothing.
Creates = Literal["store", "nothing"]
#: Subcommands on one store. Only those that start runs may create the store
#: (the demo, and a worker that keeps polling: started before the first run);
#: every other one, ``worker --once`` included, refuses a store that is not
#: there (pointed at a mistyped path it would create an empty store and find
#: nothing due).
COMMANDS: dict[str, tuple[Command, Creates]] = {
    "threads": (commands.threads, "nothing"),
    "history": (commands.history, "nothing"),
    "show": (commands.show, "nothing"),
    "diff": (commands.diff, "nothing"),
    "prune": (commands.prune, "nothing"),
    "delete": (commands.delete, "nothing"),
    "journal": (records.journal, "nothing"),
    "events": (events, "nothing"),
    "reconcile": (records.reconcile, "nothing"),
    "resume": (run_commands.resume, "nothing"),
    "fork": (run_commands.fork, "nothing"),
    "worker": (run_commands.worker, "store"),
    "demo": (run_commands.demo, "store"),
    "ui": (ui, "nothing"),
}


def _target(args: argparse.Namespace) -> StoreTarget:
    return StoreTarget.from_args(getattr(args, "store", None), getattr(args, "namespace", None))


async def _run(args: argparse.Namespace, console: Console, continuation: Continuation) -> int:
    with interrupt_at_once(continuation):
        if args.command == "copy":
            return await copy(args, console, continuation)
        if args.command == "rekey":
            return await rekey(args, continuation)
        handler, creates = COMMANDS[args.command]
        target = _target(args)
        create = creates == "store" and not getattr(args, "once", False)
        store = open_cli_store(target, create=create, sealing=keyring_from_args(args))
        session = Session(args, store, console, target, continuation)
        try:
            if session.graph_specs:  # a bad --graph fails every command, not only those that run
                _ = session.registry
            return await handler(session)
        except asyncio.CancelledError:
            if continuation.interrupted:
                await session.note_interrupt()
            raise
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
        if exc.moved_on is None:  # its holder may have died: the same command works after `until`
            return f"; if that process died, run this again after {exc.until}; see it with: {show}"
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


def _text(exc: BaseException) -> str:
    """What ``exc`` says (a claimed step: who holds it and until when, without
    the revisions compared, which read alike and mean nothing to an operator)."""
    if isinstance(exc, StepClaimed):
        if exc.moved_on is None:
            return (
                f"thread {exc.thread!r} step {exc.step} is being resumed by {exc.holder} "
                f"(its claim holds until {exc.until})"
            )
        return (
            f"thread {exc.thread!r} step {exc.step} was already answered by {exc.holder}; "
            f"the run has moved on to step {exc.moved_on}"
        )
    return str(exc) or type(exc).__name__


def _urls(args: argparse.Namespace) -> list[str]:
    """The store URLs the command was given (their credentials are masked in all it prints)."""
    given = [getattr(args, flag, None) for flag in ("store", "source", "destination")]
    return [url for url in [*given, os.environ.get(STORE_ENV)] if isinstance(url, str) and url]


def _message(args: argparse.Namespace, exc: BaseException) -> str:
    message = _text(exc)
    if isinstance(exc, StoreUnavailable):
        message = f"cannot reach {_where(args)} (agentflow {args.command}): {message}"
    elif isinstance(exc, StoreNotFound) and not _is_local(args):
        message = f"{message} (in {_where(args)})"
    message += _hint(args, exc)
    note = hidden_store_note(message)
    message += f" {note}" if note else ""
    return inert(without_passwords(message, _urls(args)))


def _fail(args: argparse.Namespace, exc: BaseException, code: str, status: int) -> int:
    message = _message(args, exc)
    if getattr(args, "json", False):
        print(json_line({"error": code, "message": message}), file=sys.stderr)
    else:
        print(f"agentflow: error: {message}", file=sys.stderr)
    return status


def _leaf(exc: BaseException) -> BaseException:
    """The error an exception group stands for: its first agentflow error (a
    task group wraps what failed in one of its tasks), else its first leaf."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = [_leaf(inner) for inner in exc.exceptions]
    return next((e for e in leaves if isinstance(e, AgentflowError)), leaves[0])


def _interrupted(args: argparse.Namespace, argv: Sequence[str], c: Continuation) -> int:
    """Report Ctrl-C: what was done, and the commands that continue the work
    (the command itself again, unless the command named others)."""
    hidden = {url: STORE_ENV for url in [getattr(args, "store", None)] if url and has_password(url)}
    for flag, variable in (("source", "SRC_URL"), ("destination", "DST_URL")):
        url = getattr(args, flag, None)
        if isinstance(url, str) and has_password(url):
            hidden[url] = variable
    lines = c.commands or ([repeated_command(argv, hidden)] if c.counts or not c.thread else [])
    note = hidden_store_note("\n".join(lines))
    urls = _urls(args)
    if getattr(args, "json", False):
        report = {
            "error": "interrupted",
            "message": without_passwords(c.summary(), urls),
            "continue_with": [without_passwords(line, urls) for line in lines],
        }
        print(json_line(report), file=sys.stderr)
        return EXIT_INTERRUPTED
    text = [f"agentflow: {c.summary()}"]
    if lines:
        text += [
            "continue with:",
            *(f"  {line}" for line in lines),
            *([f"  {note}"] if note else []),
        ]
    if sys.stderr.isatty():  # after the terminal's ^C echo
        print(file=sys.stderr)
    for line in text:
        print(inert(without_passwords(line, urls)), file=sys.stderr)
    return EXIT_INTERRUPTED


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentflow`` console script (and ``python -m agentflow``)."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(words)
    if args.command is None:
        parser.print_help()
        sys.exit(EXIT_OK)
    # With --json, stdout carries only JSON; progress (countdowns) goes to stderr.
    # Markup, emoji codes and highlighting are off: store text is printed as text.
    console = CliConsole(stderr=bool(getattr(args, "json", False)))
    debug = os.environ.get("AGENTFLOW_DEBUG", "") not in ("", "0")
    continuation = Continuation()
    with masked_logs(_urls(args)):
        try:
            status = asyncio.run(_run(args, console, continuation))
        except (KeyboardInterrupt, asyncio.CancelledError):
            status = _interrupted(args, words, continuation)
        except BrokenPipeError:  # the reader of stdout (`| head`) has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
            status = EXIT_OK
        except Exception as raised:
            exc = _leaf(raised)
            if continuation.interrupted:  # a driver may turn the cancellation into its own error
                status = _interrupted(args, words, continuation)
            elif debug:
                raise
            elif isinstance(exc, AgentflowError):
                status = _fail(args, exc, exc.code, exit_status(exc))
            elif isinstance(exc, OSError):
                status = _fail(args, exc, "os_error", EXIT_FAILED)
            else:  # a bug: still one line, and how to see more
                bug = RuntimeError(
                    f"unexpected {type(exc).__name__}: {exc}; AGENTFLOW_DEBUG=1 shows where"
                )
                status = _fail(args, bug, "internal_error", EXIT_FAILED)
    sys.exit(status)
