"""The console's two pages: the threads list and a thread.

Each is a function of what :mod:`agentflow.ui.views` read, returning the
``<main>`` of the page (:func:`agentflow.ui.html.page` wraps it; the live
script fetches it alone to refresh in place). Store text enters only as
``str`` children and attribute values, so it is escaped (:mod:`.html`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentflow.checkpoint.base import Checkpoint
from agentflow.cli.parser import STATUSES
from agentflow.cli.render import diff_states, event_of
from agentflow.durable import DurableCheckpoint
from agentflow.ui import forms
from agentflow.ui.html import Child, Html, el, json_block, link, one_line, url
from agentflow.ui.views import EVENTS_SHOWN, Listing, ThreadView

__all__ = ["Frame", "header", "threads_main", "thread_main"]


@dataclass(frozen=True)
class Frame:
    """What every page says about the console itself."""

    store: str
    read_only: bool


def header(frame: Frame) -> Html:
    mode = el("span", "read-only", class_="badge") if frame.read_only else None
    return el(
        "header",
        el("a", "agentflow console", href="/", class_="home"),
        el("span", frame.store, class_="store"),
        mode,
        el("span", "", id="stale", class_="stale", hidden=True),
    )


def _status(status: str) -> Html:
    return el("span", status, class_=f"status status-{status}")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Child]], **attrs: Any) -> Html:
    head = el("thead", el("tr", [el("th", h) for h in headers]))
    body = el("tbody", [el("tr", [el("td", cell) for cell in row]) for row in rows])
    return el("table", head, body, **attrs)


def _thread_link(thread: str) -> Html:
    return link(el("code", thread), "/thread", id=thread)


def _note(note: str | None) -> Html | None:
    """What the last action did, on the page it redirected to."""
    return el("p", note, class_="note", role="status") if note else None


def threads_main(
    listing: Listing, *, status: str | None, prefix: str, limit: int, note: str | None
) -> Html:
    """The threads list: filters, one keyset page, and the link to the next."""
    options = [el("option", "any status", value="")] + [
        el("option", s, value=s, selected=s == status) for s in STATUSES
    ]
    filters = el(
        "form",
        el("label", "status ", el("select", options, name="status")),
        el(
            "label",
            "id starts with ",
            el("input", type="search", name="prefix", value=prefix, autocomplete="off"),
        ),
        el("input", type="hidden", name="limit", value=limit),
        el("button", "Filter", type="submit"),
        method="get",
        action="/",
        class_="filters",
    )
    rows: list[list[Child]] = [
        [
            _thread_link(info.thread),
            _status(info.status),
            info.latest_step,
            info.ts,
            info.wake_at or "-",
        ]
        for info in listing.threads
    ]
    found = (
        _table(["thread", "status", "step", "updated", "wakes at"], rows, id="threads")
        if rows
        else el("p", f"no {status} threads" if status else "no threads", class_="empty")
    )
    searched = (
        el("p", f"searched {listing.scanned} threads for ids starting with ", el("code", prefix))
        if listing.scanned is not None
        else None
    )
    query = {"status": status, "prefix": prefix or None, "limit": limit}
    more = (
        link("next page", "/", cursor=listing.next_cursor, **query) if listing.next_cursor else None
    )
    pager = el("nav", link("first page", "/", **query), " ", more, class_="pager")
    return el("section", el("h1", "threads"), _note(note), filters, searched, found, pager)


def _summary(view: ThreadView) -> Html:
    cp, record, lease = view.latest, view.record, view.lease
    rows: list[tuple[str, Child]] = [
        ("status", _status(view.status)),
        ("step", cp.step),
        ("next", ", ".join(cp.next) or "-"),
        ("updated", cp.ts),
    ]
    if cp.wake_at:
        rows.append(("wakes at", cp.wake_at))
    if cp.interrupted and cp.wake_at is None:
        rows.append(("asks", el("code", cp.interrupt_node or "-")))
        rows.append(("question", json_block(cp.interrupt_payload)))
    if cp.parent:
        rows.append(("parent", el("code", cp.parent)))
    rows.append(("lease", _lease(lease)))
    rows.append(("record", _record(record)))
    return el("dl", [(el("dt", k), el("dd", v)) for k, v in rows], class_="summary")


def _lease(lease: dict[str, Any] | None) -> Child:
    if lease is None:
        return "unclaimed"
    state = "held" if lease["held"] else "lapsed"
    return [el("code", lease["by"]), f" until {lease['until']} ({state})"]


def _record(record: DurableCheckpoint | None) -> str:
    if record is None:
        return "none yet (the thread gets one when it is next run)"
    ended = record.terminal_result.get("message", "") if record.terminal_result else ""
    return (
        f"{record.status.value}, cycle {record.cycle_index}, resume attempt "
        f"{record.resume_attempt}" + (f": {ended}" if ended else "")
    )


def _timeline(view: ThreadView, shown: int, read_only: bool) -> Html:
    rows: list[list[Child]] = []
    previous: Checkpoint | None = None
    for cp in view.steps:
        known = previous if previous is not None and previous.step == cp.step - 1 else None
        state = link("state", "/thread", id=view.thread, step=cp.step)
        fork = None if read_only else link("fork…", "/thread", id=view.thread, fork=cp.step)
        rows.append([cp.step, cp.ts, event_of(known, cp), [state, " ", fork]])
        previous = cp
    table = _table(["step", "time", "event", ""], rows, id="timeline")
    steps = [cp.step for cp in view.steps]
    return el("section", el("h2", "timeline"), table, _diff_form(view.thread, steps, shown))


def _diff_form(thread: str, steps: list[int], shown: int) -> Html:
    def choose(name: str, default: int) -> Html:
        options = [el("option", s, value=s, selected=s == default) for s in steps]
        return el("select", options, name=name)

    first = steps[-2] if len(steps) > 1 else steps[-1]
    # Posted, not a GET form: a GET form drops its action's query, and a thread
    # id in a form field would have its line breaks rewritten by the browser.
    return el(
        "form",
        el("input", type="hidden", name="step", value=shown),
        el("label", "diff step ", choose("a", first)),
        el("label", " to step ", choose("b", steps[-1])),
        el("button", "Diff", type="submit"),
        method="post",
        action=url("/diff", id=thread),
        class_="diff-form",
    )


def _state(view: ThreadView, step: int) -> Html:
    cp = view.step(step) or view.latest
    return el("section", el("h2", f"state at step {cp.step}"), json_block(cp.state), id="state")


def _diff(view: ThreadView, a: int, b: int) -> Html:
    old, new = view.step(a), view.step(b)
    if old is None or new is None:
        return el("section", el("p", f"step {a if old is None else b} is not stored"), id="diff")
    changes = diff_states(old.state, new.state)
    missing = "-"
    rows = [
        [
            el("code", path or "(the whole state)"),
            kind,
            missing if kind == "added" else one_line(before),
            missing if kind == "removed" else one_line(after),
        ]
        for path, kind, before, after in changes
    ]
    body = (
        _table(["path", "change", f"step {a}", f"step {b}"], rows)
        if rows
        else el("p", f"no change in state between step {a} and step {b}")
    )
    return el("section", el("h2", f"diff {a} → {b}"), body, id="diff")


def _journal(view: ThreadView) -> Html:
    rows = [
        [
            op["step"],
            el("code", op["id"]),
            op["kind"],
            str(op["name"]),
            op["state"]
            + (" (in flight)" if op["in_flight"] else "")
            + (" (replayed)" if op.get("replayed") else ""),
            op["attempt"],
            el("code", op["idempotency_key"]) if op["idempotency_key"] else "-",
            op["time"] or "in flight",
        ]
        for op in view.operations
    ]
    headers = ["step", "operation", "kind", "name", "state", "attempt", "idempotency key", "time"]
    body = _table(headers, rows, id="journal") if rows else el("p", "no journaled calls")
    note = el("p", "time: when the step that recorded the call was written", class_="hint")
    return el("section", el("h2", "journal"), body, note if rows else None)


def _events(view: ThreadView) -> Html:
    logged = [
        [el("code", e.event_id), one_line(e.event.get("type", "-")), one_line(e.event)]
        for e in view.events
    ]
    outbox = [
        [el("code", e.event_id), e.state, one_line(e.event)]
        for e in (view.record.event_outbox if view.record is not None else [])
    ]
    more = f"the first {EVENTS_SHOWN} are shown" if view.more_events else None
    return el(
        "section",
        el("h2", "events"),
        _table(["event", "type", "payload"], logged, id="events") if logged else None,
        el("p", more) if more else None,
        el("h3", "outbox") if outbox else None,
        _table(["event", "state", "payload"], outbox, id="outbox") if outbox else None,
        None if logged or outbox else el("p", "no events"),
    )


def thread_main(
    view: ThreadView,
    *,
    step: int | None,
    diff: tuple[int, int] | None,
    fork: int | None,
    read_only: bool,
    note: str | None,
) -> Html:
    """A thread: summary, actions, timeline, state, diff, journal, events."""
    shown = step if step is not None else view.latest.step
    return el(
        "section",
        el("h1", el("code", view.thread)),
        _note(note),
        _summary(view),
        None if read_only else forms.actions(view, fork),
        _timeline(view, shown, read_only),
        _diff(view, *diff) if diff is not None else None,
        _state(view, shown),
        _journal(view),
        _events(view),
        data_thread=view.thread,
        data_status=view.status,
        data_step=view.latest.step,
    )
