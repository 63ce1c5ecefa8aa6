"""How the command line shows threads, checkpoints, timelines and diffs.

Each view has a JSON form (for ``--json``, stable keys for scripts) and a rich
form for people. The timeline is derived from the history alone: the nodes
that produced step N are the frontier of step N-1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from rich.console import Console
from rich.json import JSON
from rich.panel import Panel
from rich.table import Table

from agentflow.checkpoint.base import Checkpoint, ThreadInfo
from agentflow.runtime import status_of
from agentflow.runtime.claims import claim_of

__all__ = [
    "Change",
    "checkpoint_json",
    "diff_json",
    "diff_states",
    "dump_json",
    "event_of",
    "info_json",
    "print_checkpoint",
    "print_diff",
    "print_threads",
    "print_timeline",
    "question_of",
]

#: ``(path, kind, old, new)``; kind is added, removed, changed or appended (a list
#: that only grew: ``new`` holds just the items added).
Change = tuple[str, str, Any, Any]
_MISSING = object()
_STATUS_STYLE = {"done": "green", "interrupted": "yellow", "waiting": "cyan", "running": "red"}


def dump_json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def _short(value: Any, width: int = 60) -> str:
    text = orjson.dumps(value).decode() if value is not _MISSING else "-"
    return text if len(text) <= width else text[: width - 1] + "…"


def _status(cp: Checkpoint | ThreadInfo) -> str:
    status = status_of(cp)
    return f"[{_STATUS_STYLE[status]}]{status}[/]"


def checkpoint_json(cp: Checkpoint) -> dict[str, Any]:
    return {
        "thread": cp.thread,
        "step": cp.step,
        "status": status_of(cp),
        "state": cp.state,
        "next": list(cp.next),
        "parent": cp.parent,
        "ts": cp.ts,
        "interrupt_node": cp.interrupt_node,
        "interrupt_payload": cp.interrupt_payload,
        "wake_at": cp.wake_at,
        "claim": claim_of(cp),
        "revision": cp.revision,
    }


def info_json(info: ThreadInfo) -> dict[str, Any]:
    return {
        "thread": info.thread,
        "status": status_of(info),
        "latest_step": info.latest_step,
        "ts": info.ts,
        "wake_at": info.wake_at,
    }


def diff_states(old: Any, new: Any, path: str = "") -> list[Change]:
    """What changed from ``old`` to ``new``: mappings are compared key by key,
    anything else as a whole, so paths stay short and readable."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        changes: list[Change] = []
        for key in [*old, *(k for k in new if k not in old)]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in new:
                changes.append((sub, "removed", old[key], _MISSING))
            elif key not in old:
                changes.append((sub, "added", _MISSING, new[key]))
            else:
                changes.extend(diff_states(old[key], new[key], sub))
        return changes
    if old == new:
        return []
    where = path or "(state)"
    if isinstance(old, list) and isinstance(new, list) and new[: len(old)] == old:
        return [(where, "appended", _MISSING, new[len(old) :])]
    return [(where, "changed", old, new)]


def question_of(payload: Any) -> str:
    """A human interrupt's payload as one line: its ``question`` if it has one."""
    if isinstance(payload, dict) and isinstance(payload.get("question"), str):
        return str(payload["question"])
    return _short(payload, 48)


def event_of(previous: Checkpoint | None, cp: Checkpoint) -> str:
    """One line saying what produced ``cp``."""
    if cp.interrupted:
        if cp.wake_at is not None:
            text = f"{cp.interrupt_node} waits until {cp.wake_at[11:23]}"
        else:
            text = f"{cp.interrupt_node} asks: {question_of(cp.interrupt_payload)}"
    elif previous is None:
        origin = cp.parent.rpartition(":")[0] if cp.parent else None
        text = f"forked from {cp.parent}" if origin and origin != cp.thread else "input"
    else:
        text = "ran " + ", ".join(previous.next)
    return text + (" -> done" if cp.done else "")


def print_threads(console: Console, infos: Sequence[ThreadInfo], cursor: str | None) -> None:
    table = Table("thread", "status", "step", "updated", "wakes at", title="threads")
    for info in infos:
        table.add_row(
            info.thread, _status(info), str(info.latest_step), info.ts, info.wake_at or ""
        )
    console.print(table)
    if cursor is not None:
        console.print(f"more: --cursor {cursor}")


def print_timeline(console: Console, history: Sequence[Checkpoint], title: str) -> None:
    table = Table("step", "time", "event", "state changed", title=title)
    previous: Checkpoint | None = None
    for cp in history:
        before = previous.state if previous is not None else {}
        changed = sorted({path.split(".")[0] for path, *_ in diff_states(before, cp.state)})
        if previous is not None and previous.step != cp.step - 1:
            previous = None  # pruned gap: what ran is unknown
        table.add_row(str(cp.step), cp.ts[11:23], event_of(previous, cp), ", ".join(changed) or "-")
        previous = cp
    console.print(table)


def print_checkpoint(console: Console, cp: Checkpoint) -> None:
    lines = [
        f"status   {_status(cp)}",
        f"next     {', '.join(cp.next) or '-'}",
        f"parent   {cp.parent or '-'}",
        f"written  {cp.ts}  (revision {cp.revision})",
    ]
    if cp.interrupted:
        lines.append(f"pending  {cp.interrupt_node}: {_short(cp.interrupt_payload, 200)}")
    if cp.wake_at:
        lines.append(f"wakes at {cp.wake_at}")
    claim = claim_of(cp)
    if claim:
        lines.append(f"claimed  by {claim.get('by')} until {claim.get('until')}")
    console.print(Panel("\n".join(lines), title=f"{cp.thread} @ step {cp.step}", expand=False))
    console.print(JSON(dump_json(cp.state)))


def print_diff(console: Console, changes: Sequence[Change], a: int, b: int) -> None:
    if not changes:
        console.print(f"no change in state between step {a} and step {b}")
        return
    table = Table("path", "change", f"step {a}", f"step {b}", title=f"state diff {a} -> {b}")
    for path, kind, old, new in changes:
        table.add_row(path, kind, _short(old), _short(new))
    console.print(table)


def diff_json(changes: Sequence[Change]) -> list[dict[str, Any]]:
    return [
        {"path": path, "change": kind}
        | ({"old": old} if old is not _MISSING else {})
        | ({"new": new} if new is not _MISSING else {})
        for path, kind, old, new in changes
    ]
