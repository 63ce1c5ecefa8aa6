"""``agentflow copy SRC_URL DST_URL``: move or back up a store, threads whole.

The work is :class:`~agentflow.cli.copy.StoreCopy` (checkpoints, durable
records and events); this module opens the two stores (the source is never
created; the destination in ``--to-namespace`` when given, so every part is
checked or sealed for that namespace), shows a progress bar on a terminal
and a summary otherwise, and exits 1 when anything was left uncopied.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from agentflow.checkpoint.store import Store
from agentflow.cli.copy import CopyReport, Outcome, StoreCopy, count_threads, has_thread
from agentflow.cli.errors import CopyIncomplete, UsageError
from agentflow.cli.keys import keyring_from_args
from agentflow.cli.render import dump_json, inert_json
from agentflow.cli.session import StoreTarget, open_cli_store
from agentflow.cli.text import inert
from agentflow.runtime import ThreadNotFound

__all__ = ["copy"]

#: Threads named in a refusal or mismatch message before "and N more".
_NAMED = 5


async def _named(store: Store, threads: Sequence[str]) -> AsyncIterator[str]:
    for thread in threads:
        if not await has_thread(store, thread):
            raise ThreadNotFound(f"thread {thread!r} not found in the source store")
        yield thread


def _some(threads: Sequence[str]) -> str:
    more = len(threads) - _NAMED
    return ", ".join(map(repr, threads[:_NAMED])) + (f" and {more} more" if more > 0 else "")


def _summary(report: CopyReport, source: StoreTarget, destination: StoreTarget) -> dict[str, Any]:
    return {
        "source": source.safe,
        "destination": destination.safe,
        "namespace": source.namespace,
        "to_namespace": destination.namespace,
        "threads": report.threads,
        "copied": report.count("copied"),
        "unchanged": report.count("unchanged"),
        "replaced": report.count("replaced"),
        "refused": report.refused,
        "checkpoints": report.checkpoints,
        "writes": report.writes,
        "records": report.records,
        "records_written": report.records_written,
        "events": report.events,
        "events_written": report.events_written,
        "verified": not report.mismatched,
        "mismatched": [{"thread": t, "why": why} for t, why in report.mismatched],
    }


def _in(namespace: str | None) -> str:
    return f" (namespace {namespace})" if namespace else ""


def _print_summary(console: Console, summary: dict[str, Any]) -> None:
    lines = [
        f"copied {summary['source']}{_in(summary['namespace'])} -> "
        f"{summary['destination']}{_in(summary['to_namespace'])}",
        f"threads: {summary['threads']} ({summary['copied']} copied, "
        f"{summary['unchanged']} already there, {summary['replaced']} replaced, "
        f"{len(summary['refused'])} refused)",
        f"checkpoints: {summary['checkpoints']} read, {summary['writes']} written",
        f"durable records: {summary['records']} read, {summary['records_written']} written",
        f"events: {summary['events']} read, {summary['events_written']} written",
        "verified: every copied thread has the source's checkpoint count, latest step and "
        "revision, its record and its events"
        if summary["verified"]
        else f"verification FAILED for {len(summary['mismatched'])} thread(s)",
    ]
    for line in lines:
        console.print(inert(line), soft_wrap=True)


async def copy(args: Any, console: Console) -> int:
    if hasattr(args, "store"):
        raise UsageError("copy takes its stores as SRC_URL and DST_URL; --store does not apply")
    namespace = getattr(args, "namespace", None)
    source = StoreTarget.from_args(args.source, namespace)
    to_namespace = args.to_namespace if args.to_namespace is not None else namespace
    destination = StoreTarget.from_args(args.destination, to_namespace)
    if (source.url, source.namespace) == (destination.url, destination.namespace):
        raise UsageError("copy needs two different stores (or namespaces)")
    keyring = keyring_from_args(args)
    src = open_cli_store(source, create=False, sealing=keyring)
    try:
        dst = open_cli_store(destination, create=True, sealing=keyring)
        try:
            report = await _copy(args, console, src, dst)
        finally:
            await dst.close()
    finally:
        await src.close()
    summary = _summary(report, source, destination)
    as_json = bool(getattr(args, "json", False))
    if as_json:
        print(inert_json(dump_json(summary)))
    else:
        _print_summary(console, summary)
    if report.refused:
        raise CopyIncomplete(
            f"{len(report.refused)} thread(s) exist at the destination with other content and "
            f"were not copied: {_some(report.refused)}; pass --overwrite to replace them"
        )
    if report.mismatched:
        raise CopyIncomplete(
            "read back from the destination, these threads do not match the source: "
            + "; ".join(f"{t!r}: {why}" for t, why in report.mismatched[:_NAMED])
        )
    return 0


async def _copy(args: Any, console: Console, src: Store, dst: Store) -> CopyReport:
    named: list[str] = args.thread or []
    threads = _named(src, named) if named else None  # None: all, paired with the destination
    if not console.is_terminal or getattr(args, "json", False):
        return await StoreCopy(
            src, dst, overwrite=args.overwrite, concurrency=args.concurrency
        ).run(threads)
    total = len(named) if named else await count_threads(src)
    columns = (
        TextColumn("copying"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("threads"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("copy", total=total)

        def advance(thread: str, outcome: Outcome) -> None:
            progress.advance(task)

        copier = StoreCopy(
            src, dst, overwrite=args.overwrite, concurrency=args.concurrency, on_thread=advance
        )
        return await copier.run(threads)
