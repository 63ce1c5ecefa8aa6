"""``agentflow copy SRC_URL DST_URL``: move or back up a store, threads whole.

The work is :class:`~agentflow.cli.copy.StoreCopy` (checkpoints, durable
records and events); this module opens the two stores (the source is never
created; the destination in ``--to-namespace`` when given, so every part is
checked or sealed for that namespace), counts the threads to copy so
progress has a total and an ETA (a bar on a terminal, else a line on stderr
every few seconds), prints a summary, and exits 1 when anything was left
uncopied: threads that differ at the destination, those it holds ahead of
the source (only ``--overwrite-newer`` replaces them), ids it cannot hold.
Ctrl-C says how far it got; the same command goes on from there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from rich.console import Console

from agentflow.checkpoint.store import Store
from agentflow.cli.copy import CopyReport, Outcome, StoreCopy, count_threads, has_thread
from agentflow.cli.errors import CopyIncomplete, UsageError
from agentflow.cli.interrupts import Continuation
from agentflow.cli.keys import keyring_from_args
from agentflow.cli.progress import Progress
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
        "newer": report.newer,
        "skipped": [{"thread": t, "why": why} for t, why in report.skipped],
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


def _counts(report: CopyReport) -> str:
    return (
        f"{report.count('copied'):,} copied, {report.count('unchanged'):,} already there, "
        f"{report.count('replaced'):,} replaced, {len(report.refused):,} refused, "
        f"{len(report.skipped):,} skipped"
    )


def _print_summary(console: Console, summary: dict[str, Any], report: CopyReport) -> None:
    lines = [
        f"copied {summary['source']}{_in(summary['namespace'])} -> "
        f"{summary['destination']}{_in(summary['to_namespace'])}",
        f"threads: {summary['threads']:,} ({_counts(report)})",
        f"checkpoints: {summary['checkpoints']:,} read, {summary['writes']:,} written",
        f"durable records: {summary['records']:,} read, {summary['records_written']:,} written",
        f"events: {summary['events']:,} read, {summary['events_written']:,} written",
        "verified: every copied thread has the source's checkpoint count, latest step and "
        "revision, its record and its events"
        if summary["verified"]
        else f"verification FAILED for {len(summary['mismatched'])} thread(s)",
    ]
    lines += [f"skipped {thread!r}: {why}" for thread, why in report.skipped]
    for line in lines:
        console.print(inert(line), soft_wrap=True)


def _incomplete(report: CopyReport) -> CopyIncomplete | None:
    """Why the copy is incomplete (exit 1), or None."""
    why = []
    others = [t for t in report.refused if t not in report.newer]
    if others:
        why.append(
            f"{len(others)} thread(s) exist at the destination with other content and were "
            f"not copied: {_some(others)}; pass --overwrite to replace them"
        )
    if report.newer:
        why.append(
            f"{len(report.newer)} thread(s) are ahead at the destination (more checkpoints, "
            f"a later or newer latest one, or a later revision of their record) and were left "
            f"alone: {_some(report.newer)}; only --overwrite-newer replaces them with the "
            "source's older copy, and that loses what the destination holds beyond it"
        )
    if report.skipped:
        why.append(
            f"{len(report.skipped)} thread id(s) the destination cannot hold were skipped: "
            + _some([t for t, _ in report.skipped])
        )
    if report.mismatched:
        why.append(
            "read back from the destination, these threads do not match the source: "
            + "; ".join(f"{t!r}: {why}" for t, why in report.mismatched[:_NAMED])
        )
    return CopyIncomplete("; ".join(why)) if why else None


async def copy(args: Any, console: Console, continuation: Continuation) -> int:
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
            report = await _copy(args, src, dst, continuation)
        finally:
            await dst.close()
    finally:
        await src.close()
    summary = _summary(report, source, destination)
    if getattr(args, "json", False):
        print(inert_json(dump_json(summary)))
    else:
        _print_summary(console, summary, report)
    incomplete = _incomplete(report)
    if incomplete is not None:
        raise incomplete
    return 0


async def _copy(args: Any, src: Store, dst: Store, continuation: Continuation) -> CopyReport:
    named: list[str] = args.thread or []
    threads = _named(src, named) if named else None  # None: all, paired with the destination
    total = len(named) if named else await count_threads(src)
    with Progress("copy", total, every=args.interval) as progress:

        def now() -> tuple[int, str]:
            report = copier.report
            return report.threads, f"{_counts(report)}; {report.checkpoints:,} checkpoints"

        def advance(thread: str, outcome: Outcome) -> None:
            progress.update(*now())

        copier = StoreCopy(
            src,
            dst,
            overwrite=args.overwrite,
            overwrite_newer=args.overwrite_newer,
            concurrency=args.concurrency,
            on_thread=advance,
        )
        continuation.counts = lambda: (
            f"{copier.report.threads:,} of {total:,} threads done: {_counts(copier.report)}; "
            "the same command goes on from there"
        )
        reporting = asyncio.create_task(progress.keep_reporting(now))
        try:
            return await copier.run(threads)
        finally:
            reporting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporting
