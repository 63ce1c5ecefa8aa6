"""The subcommands that read or trim the store: threads, history, show, diff,
prune, delete. Each takes a :class:`Session` and returns an exit status.

They need no graph, and none of them creates a store (see
:func:`~agentflow.cli.session.open_cli_store`).
"""

from __future__ import annotations

from datetime import UTC, datetime

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.store import Store
from agentflow.checkpoint.store_base import run_thread_status
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.cli import render
from agentflow.cli.errors import ThreadHeld, UsageError
from agentflow.cli.foreign import foreign_record
from agentflow.cli.records import durable_line, lease_of, record_of
from agentflow.cli.session import NAMESPACE_ENV, Session
from agentflow.cli.timeline import print_timeline, write_history_json
from agentflow.durable import ClaimActive
from agentflow.runtime import ThreadNotFound, status_of
from agentflow.runtime.engine import read_checkpoint
from agentflow.runtime.section import runtime_of

__all__ = [
    "delete",
    "delete_whole",
    "diff",
    "history",
    "history_of",
    "print_history",
    "prune",
    "show",
    "threads",
]


async def history_of(store: Checkpointer, thread: str) -> list[Checkpoint]:
    """Every checkpoint of ``thread`` in a list (the console's pages; the command
    line streams instead), or ThreadNotFound."""
    steps = [cp async for cp in store.history(thread)]
    if not steps:
        raise ThreadNotFound(f"thread {thread!r} not found")
    return steps


async def print_history(s: Session, thread: str, title: str) -> None:
    """``thread``'s timeline (table, or ``--json``), read and printed step by step."""
    latest = await read_checkpoint(s.store, thread)
    steps = s.store.history(thread)
    try:
        if s.json:
            await write_history_json(steps, latest.step, s.write)
        else:
            await print_timeline(s.console, steps, title, latest.step)
    finally:
        close = getattr(steps, "aclose", None)
        if close is not None:
            await close()


def _none_found(s: Session, wanted: str | None) -> str:
    """What ``threads`` says when it finds none: in a named namespace, that the
    name is matched exactly (a mistyped one is simply empty)."""
    found = f"no {wanted} threads" if wanted else "no threads"
    namespace = s.target.namespace
    if namespace is None:
        return found
    flag = "--namespace" if s.target.namespace_from_flag else f"${NAMESPACE_ENV}"
    return (
        f"{found} in namespace {namespace!r} ({flag}); a namespace is matched exactly "
        "and holds threads once a run is stored in it (without it: the default namespace)"
    )


async def threads(s: Session) -> int:
    wanted, limit = s.args.status, s.args.limit
    page = await s.store.list_threads_page(limit=limit, cursor=s.args.cursor, status=wanted)
    found, cursor = page.threads, page.next_cursor
    if s.json:
        s.emit({"threads": [render.info_json(i) for i in found], "next_cursor": cursor})
        return 0
    if found:
        render.print_threads(s.console, found)
        if any(status_of(info) == "reconciliation_required" for info in found):
            s.say("see what each waits for with: ", s.command("journal", "THREAD"))
    else:
        s.say(_none_found(s, wanted))
    if cursor is not None:
        more = ["threads", "--limit", str(limit), "--cursor", cursor]
        s.say("more: ", s.command(*more, *(["--status", wanted] if wanted else [])))
    return 0


async def history(s: Session) -> int:
    await print_history(s, s.args.thread, f"history of {s.args.thread}")
    return 0


async def _show_foreign(s: Session, cp: Checkpoint, latest: Checkpoint) -> None:
    """``show`` of a record an adapter wrote: what it is; for LangGraph's pending
    writes (step 2k + 1), the state of their checkpoint (step 2k) as well."""
    record = foreign_record(cp)
    assert record is not None
    checkpoint = None
    if record.kind == "writes" and cp.step > 0:
        below = await s.store.get(cp.thread, cp.step - 1)
        tag = foreign_record(below) if below is not None else None
        if (
            tag is not None
            and tag.kind == "checkpoint"
            and tag.fields.get("id") == record.fields.get("id")
        ):
            checkpoint = below
    if s.json:
        view = render.checkpoint_json(cp, latest.step)
        s.emit(view | {"framework": record.framework, "kind": record.kind})
        return
    render.print_foreign(s.console, cp, record, checkpoint, latest.step)


async def show(s: Session) -> int:
    cp = await read_checkpoint(s.store, s.args.thread, s.args.step)
    latest = cp if s.args.step is None else await read_checkpoint(s.store, s.args.thread)
    adapter = foreign_record(cp)
    if adapter is not None and not adapter.stepwise:
        await _show_foreign(s, cp, latest)
        return 0
    record = await record_of(s.store, s.args.thread) if cp.step == latest.step else None
    lease = lease_of(record)
    imposed = run_thread_status(record.status) if record is not None else None
    resumed_by = None
    if cp.interrupted and cp.step != latest.step:
        answered = await s.store.get(s.args.thread, cp.step + 1)
        by = runtime_of(answered).get("by") if answered is not None else None
        resumed_by = str(by) if by else None
    if s.json:
        durable = {"durable_status": record.status.value if record is not None else None}
        s.emit(render.checkpoint_json(cp, latest.step, lease, resumed_by, imposed) | durable)
    else:
        line = durable_line(s, record)
        render.print_checkpoint(
            s.console,
            cp,
            latest.step,
            lease=lease,
            resumed_by=resumed_by,
            durable=line,
            status=imposed,
        )
    return 0


async def diff(s: Session) -> int:
    a = await read_checkpoint(s.store, s.args.thread, s.args.a)
    b = await read_checkpoint(s.store, s.args.thread, s.args.b)
    changes = render.diff_states(a.state, b.state)
    if s.json:
        s.emit(
            {
                "thread": s.args.thread,
                "a": a.step,
                "b": b.step,
                "changes": render.diff_json(changes),
            }
        )
    else:
        render.print_diff(s.console, changes, a.step, b.step)
    return 0


def _older_than(value: str | None) -> tuple[str | None, str | None]:
    """``--older-than`` as an ISO instant with offset, and a note when the
    given one had none (it is read as UTC, and the output says so)."""
    if value is None:
        return None, None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(
            f"--older-than takes an ISO-8601 time such as 2026-01-31T12:00:00+00:00, got {value!r}"
        ) from None
    if moment.tzinfo is not None:
        return moment.isoformat(), None
    utc = moment.replace(tzinfo=UTC).isoformat()
    return utc, f"--older-than {value} has no offset: read as UTC, {utc}"


def _reaches(latest: Checkpoint, before_step: int | None, older_than: str | None) -> bool:
    """True when the bounds would delete ``latest`` (both given: both must match)."""
    by_step = before_step is None or latest.step < before_step
    by_time = older_than is None or parse_instant(latest.ts) < parse_instant(older_than)
    return by_step and by_time


async def prune(s: Session) -> int:
    if s.args.before_step is None and s.args.older_than is None:
        raise UsageError("prune needs --before-step N, --older-than TIME, or both")
    older_than, note = _older_than(s.args.older_than)
    latest = await read_checkpoint(s.store, s.args.thread)
    before_step = s.args.before_step
    # The latest checkpoint is what a resume continues from: kept unless asked.
    kept_latest = not s.args.include_latest and _reaches(latest, before_step, older_than)
    if kept_latest:
        before_step = latest.step if before_step is None else min(before_step, latest.step)
    removed = await s.store.prune(s.args.thread, before_step=before_step, older_than=older_than)
    if s.json:
        s.emit(
            {
                "thread": s.args.thread,
                "removed": removed,
                "kept_latest": latest.step if kept_latest else None,
                "older_than": older_than,
            }
        )
        return 0
    if note:
        s.say(note)
    kept = (
        f"; kept the latest, step {latest.step} (--include-latest deletes it too)"
        if kept_latest
        else ""
    )
    s.say(f"pruned {removed} checkpoint(s) of ", s.args.thread, kept)
    return 0


async def delete_whole(store: Store, thread: str, *, force: bool, forced: str) -> None:
    """Delete ``thread`` whole; while a process holds its lease (unless ``force``),
    :class:`ThreadHeld` naming the holder, with ``forced`` saying how to delete anyway."""
    await read_checkpoint(store, thread)
    try:
        await store.delete_thread(thread, force=force)
    except ClaimActive:
        lease = lease_of(await store.load(thread))
        holder = f" by {lease['by']} until {lease['until']}" if lease else ""
        raise ThreadHeld(
            f"thread {thread!r} is held{holder}; deleting it now would make that "
            f"process fail, perhaps after a call it made went out. Wait for it, or: {forced}"
        ) from None


async def delete(s: Session) -> int:
    thread = s.args.thread
    forced = s.command("delete", thread, "--force")
    await delete_whole(s.store, thread, force=s.args.force, forced=forced)
    if s.json:
        s.emit({"thread": thread, "deleted": True})
    else:
        s.say("deleted ", thread)
    return 0
