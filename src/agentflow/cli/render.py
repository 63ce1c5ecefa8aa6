"""How the command line shows threads, checkpoints, timelines and diffs.

Each view has a JSON form (for ``--json``, stable keys for scripts) and a form
for people. Everything the store supplies is shown inert (:mod:`.text`);
what a user types back (thread ids, steps, times) is never truncated. The
timeline is derived from the history alone: the nodes that produced step N
are the frontier of step N-1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from agentflow.checkpoint.base import Checkpoint, ThreadInfo
from agentflow.checkpoint.timestamps import parse_instant
from agentflow.cli.foreign import ForeignRecord, foreign_record
from agentflow.cli.text import inert, inert_json_text
from agentflow.runtime import status_of
from agentflow.runtime.result import Status

__all__ = [
    "Change",
    "checkpoint_json",
    "diff_json",
    "diff_states",
    "pointer_token",
    "UNKNOWN",
    "dump_json",
    "event_of",
    "forked_from",
    "info_json",
    "inert_json",
    "json_line",
    "print_checkpoint",
    "print_columns",
    "print_diff",
    "print_foreign",
    "print_threads",
    "question_of",
    "top_pointer",
]

#: ``(path, kind, old, new)``; kind is added, removed, changed or appended (a list
#: that only grew: ``new`` holds just the items added).
Change = tuple[str, str, Any, Any]
_MISSING = object()
_STATUS_STYLE = {
    "done": "green",
    "interrupted": "yellow",
    "waiting": "cyan",
    "running": "red",
    "reconciliation_required": "bold red",
    "failed": "magenta",
}
#: Shown where what changed cannot be known (the step before was pruned).
UNKNOWN = "?"


def dump_json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def json_line(value: Any) -> str:
    """``value`` as one line of JSON (an error on stderr is one line), inert."""
    return inert_json_text(orjson.dumps(value).decode())


def inert_json(text: str) -> str:
    """JSON text with any character a terminal would act on escaped. orjson
    already escapes C0 controls; C1 controls, format characters and the other
    invisible ones remain, and only inside strings, where their JSON escapes
    mean the same value."""
    return "\n".join(inert_json_text(line) for line in text.split("\n"))


def _short(value: Any, width: int = 60) -> str:
    """``value`` as JSON, cut to ``width`` for a table cell (raw: show it inert)."""
    text = orjson.dumps(value).decode() if value is not _MISSING else "-"
    return text if len(text) <= width else text[: width - 1] + "…"


def _status(cp: Checkpoint | ThreadInfo, imposed: Status | None = None) -> Text:
    status = imposed or status_of(cp)
    return Text(status, style=_STATUS_STYLE[status])


def _now_us() -> int:
    return parse_instant(datetime.now(UTC).isoformat())


def lease_view(by: str, until: str) -> dict[str, Any]:
    """A run's lease as ``show`` reports it: who, until when, and whether it still holds."""
    return {"by": by, "until": until, "held": bool(until) and parse_instant(until) > _now_us()}


def claim_view(
    cp: Checkpoint,
    latest_step: int,
    lease: dict[str, Any] | None = None,
    resumed_by: str | None = None,
) -> dict[str, Any]:
    """Who holds the run, on its latest checkpoint (``claim``: the durable lease,
    ``held`` until it lapses); on a suspend the run has moved past, who
    answered it (``resumed_by``)."""
    if cp.step != latest_step:
        return {"claim": None} | ({"resumed_by": resumed_by} if resumed_by else {})
    return {"claim": lease}


def checkpoint_json(
    cp: Checkpoint,
    latest_step: int,
    lease: dict[str, Any] | None = None,
    resumed_by: str | None = None,
    status: Status | None = None,
) -> dict[str, Any]:
    """``cp`` as ``show --json`` prints it; ``status`` is what the thread's record
    imposes on its latest checkpoint (``reconciliation_required``, ``failed``)."""
    return {
        "thread": cp.thread,
        "step": cp.step,
        "status": status or status_of(cp),
        "state": cp.state,
        "next": list(cp.next),
        "parent": cp.parent,
        "ts": cp.ts,
        "interrupt_node": cp.interrupt_node,
        "interrupt_payload": cp.interrupt_payload,
        "wake_at": cp.wake_at,
        **claim_view(cp, latest_step, lease, resumed_by),
        "revision": cp.revision,
        "latest": cp.step == latest_step,
    }


def info_json(info: ThreadInfo) -> dict[str, Any]:
    return {
        "thread": info.thread,
        "status": status_of(info),
        "latest_step": info.latest_step,
        "ts": info.ts,
        "wake_at": info.wake_at,
    }


def pointer_token(key: str) -> str:
    """``key`` as one reference token of a JSON Pointer (RFC 6901: ``~`` and ``/`` escaped)."""
    return key.replace("~", "~0").replace("/", "~1")


def top_pointer(pointer: str) -> str:
    """The JSON Pointer of the top-level key ``pointer`` starts under (``""``, the
    whole state, stays itself): ``/refund/amount`` is under ``/refund``, and the
    literal key ``refund.amount`` is ``/refund.amount``."""
    return "/" + pointer[1:].split("/", 1)[0] if pointer else ""


def diff_states(old: Any, new: Any, path: str = "") -> list[Change]:
    """What changed from ``old`` to ``new``: mappings are compared key by key,
    anything else as a whole. Paths are JSON Pointers (RFC 6901; ``""`` is the
    whole state), so the literal key ``"refund.amount"`` (``/refund.amount``) and
    the nested ``refund -> amount`` (``/refund/amount``) never read alike."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        changes: list[Change] = []
        for key in [*old, *(k for k in new if k not in old)]:
            sub = f"{path}/{pointer_token(str(key))}"
            if key not in new:
                changes.append((sub, "removed", old[key], _MISSING))
            elif key not in old:
                changes.append((sub, "added", _MISSING, new[key]))
            else:
                changes.extend(diff_states(old[key], new[key], sub))
        return changes
    if old == new:
        return []
    if isinstance(old, list) and isinstance(new, list) and new[: len(old)] == old:
        return [(path, "appended", _MISSING, new[len(old) :])]
    return [(path, "changed", old, new)]


def question_of(payload: Any) -> str:
    """A human interrupt's payload as one line: its ``question`` if any (raw)."""
    if isinstance(payload, dict) and isinstance(payload.get("question"), str):
        return str(payload["question"])
    return _short(payload, 48)


def forked_from(cp: Checkpoint) -> str | None:
    origin = cp.parent.rpartition(":")[0] if cp.parent else None
    return cp.parent if origin and origin != cp.thread else None


def event_of(previous: Checkpoint | None, cp: Checkpoint) -> str:
    """One line saying what produced ``cp`` (raw: show it inert); ``previous``
    is the step before it, or None when that step is not stored. A record an
    adapter wrote (LangGraph, Agent Framework) says what it is instead: its
    steps are not a run's, so a missing step before it means nothing."""
    record = foreign_record(cp)
    if record is not None and not record.stepwise:
        return record.what + (" (an interrupt waits)" if cp.interrupted else "")
    if cp.interrupted:
        if cp.wake_at is not None:
            text = f"{cp.interrupt_node} waits until {cp.wake_at[11:23]}"
        else:
            text = f"{cp.interrupt_node} asks: {question_of(cp.interrupt_payload)}"
    elif previous is None:
        forked = forked_from(cp)
        if forked is not None:
            text = f"forked from {forked}"
        else:
            text = "input" if cp.step == 0 else "(the steps before are pruned)"
    else:
        text = "ran " + ", ".join(previous.next)
    return text + (" -> done" if cp.done else "")


def print_columns(console: Console, headers: Sequence[str], rows: Sequence[Sequence[Text]]) -> None:
    """Aligned columns, never truncated nor wrapped: what a user copies from
    them (ids, times) stays whole whatever the terminal's width."""
    cells = [[Text(h, style="bold") for h in headers], *rows]
    widths = [max(row[i].cell_len for row in cells) for i in range(len(headers))]
    for row in cells:
        line = Text()
        for i, cell in enumerate(row):
            line.append_text(cell)
            if i < len(row) - 1:
                line.append(" " * (widths[i] - cell.cell_len + 2))
        console.print(line, soft_wrap=True)


def print_threads(console: Console, infos: Sequence[ThreadInfo]) -> None:
    rows = [
        [
            Text(inert(info.thread)),
            _status(info),
            Text(str(info.latest_step)),
            Text(inert(info.ts)),
            Text(inert(info.wake_at or "-")),
        ]
        for info in infos
    ]
    print_columns(console, ["thread", "status", "step", "updated", "wakes at"], rows)


def _claim_line(view: dict[str, Any]) -> str | None:
    claim = view["claim"]
    if "resumed_by" in view:
        return f"resumed  by {view['resumed_by']}"
    if claim is None:
        return None
    if claim["held"]:
        return f"claimed  by {claim.get('by')} until {claim.get('until')}"
    return f"claim    by {claim.get('by')} lapsed at {claim.get('until')}; a resume takes it over"


def print_checkpoint(
    console: Console,
    cp: Checkpoint,
    latest_step: int,
    *,
    lease: dict[str, Any] | None = None,
    resumed_by: str | None = None,
    durable: str | None = None,
    status: Status | None = None,
) -> None:
    lines = [
        Text.assemble("status   ", _status(cp, status)),
        Text(f"next     {inert(', '.join(cp.next)) or '-'}"),
        Text(f"parent   {inert(cp.parent or '-')}"),
        Text(f"written  {inert(cp.ts)}  (revision {cp.revision})"),
    ]
    if cp.interrupted:
        pending = inert(_short(cp.interrupt_payload, 200))
        lines.append(Text(f"pending  {inert(cp.interrupt_node or '-')}: {pending}"))
    if cp.wake_at:
        lines.append(Text(f"wakes at {inert(cp.wake_at)}"))
    claim = _claim_line(claim_view(cp, latest_step, lease, resumed_by))
    if claim:
        lines.append(Text(inert(claim)))
    if durable:
        lines.append(Text(inert(durable)))
    title = Text(f"{inert(cp.thread)} @ step {cp.step}")
    console.print(Panel(Text("\n").join(lines), title=title, expand=False))
    # never wrapped: the state is JSON a user may copy (a --value, a fork --update)
    console.print(JSONHighlighter()(Text(inert_json(dump_json(cp.state)))), soft_wrap=True)


def print_foreign(
    console: Console,
    cp: Checkpoint,
    record: ForeignRecord,
    checkpoint: Checkpoint | None,
    latest_step: int,
) -> None:
    """``show`` of a record an adapter wrote: what it is, and a state that means
    something (for LangGraph's pending writes, their checkpoint's, when given)."""
    lines = [
        Text(f"record   {inert(record.what)}"),
        Text(f"written  {inert(cp.ts)}  (revision {cp.revision})"),
    ]
    if cp.interrupted:
        lines.append(Text(f"status   an interrupt waits in {record.framework}"))
    if cp.step != latest_step:
        lines.append(Text(f"latest   step {latest_step}"))
    lines.append(
        Text(f"owner    {record.framework} (through {record.adapter}), which continues it")
    )
    console.print(
        Panel(
            Text("\n").join(lines), title=Text(f"{inert(cp.thread)} @ step {cp.step}"), expand=False
        )
    )
    shown = checkpoint if checkpoint is not None else cp
    if checkpoint is not None:
        console.print(f"state of its checkpoint, step {checkpoint.step}:", soft_wrap=True)
    console.print(JSONHighlighter()(Text(inert_json(dump_json(shown.state)))), soft_wrap=True)


def print_diff(console: Console, changes: Sequence[Change], a: int, b: int) -> None:
    if not changes:
        console.print(f"no change in state between step {a} and step {b}")
        return
    table = Table("path", "change", f"step {a}", f"step {b}", title=f"state diff {a} -> {b}")
    for path, kind, old, new in changes:
        table.add_row(
            Text(inert(path or "(the whole state)")),
            Text(kind),
            Text(inert(_short(old))),
            Text(inert(_short(new))),
        )
    console.print(table)


def diff_json(changes: Sequence[Change]) -> list[dict[str, Any]]:
    return [
        {"path": path, "change": kind}
        | ({"old": old} if old is not _MISSING else {})
        | ({"new": new} if new is not _MISSING else {})
        for path, kind, old, new in changes
    ]
