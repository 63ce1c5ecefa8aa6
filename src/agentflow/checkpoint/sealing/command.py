"""``agentflow rekey``: the command's work, apart from argument parsing.

The command line opens the store and calls :func:`rekey_command`, which runs
:func:`~agentflow.checkpoint.sealing.rekey`, saves its resume token to a
state file as it goes (so an interrupted run picks up where it stopped), and
returns the exit status, the text to print and the same as JSON. The status
is 1 while anything is left to do: a part on another key, a part that could
not be read, or a durable record a live lease held (busy: run it again).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentflow.checkpoint.sealing.keyring import DEFAULT_KEYS_VARIABLE, KeyRing
from agentflow.checkpoint.sealing.rekey import (
    LeftRecord,
    PartCounts,
    RekeyProgress,
    RekeyReport,
    StoreOpener,
    rekey,
)
from agentflow.errors import InvalidArgument

__all__ = ["CommandResult", "load_keyring", "rekey_command"]

#: Exit status when parts are left on another key, busy, or could not be read.
EXIT_LEFT = 1
#: Busy threads named in the text before the rest are only counted.
MAX_SHOWN = 20


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What the command line prints (``text``, or ``data`` with ``--json``) and exits with."""

    status: int
    text: str
    data: dict[str, Any]


def load_keyring(
    keys_file: str | os.PathLike[str] | None = None,
    keys_env: str = DEFAULT_KEYS_VARIABLE,
    *,
    environ: Mapping[str, str] | None = None,
) -> KeyRing | None:
    """The key ring the command line names: ``keys_file`` if given, else the
    spec in ``keys_env`` when that variable is set, else None (no sealing)."""
    if keys_file is not None:
        return KeyRing.from_file(keys_file)
    env = os.environ if environ is None else environ
    if env.get(keys_env):
        return KeyRing.from_env(keys_env, environ=env)
    return None


async def rekey_command(
    open_store: StoreOpener,
    keyring: KeyRing | None,
    *,
    state_file: str | os.PathLike[str] | None = None,
    check: bool = False,
    echo: Callable[[str], object] | None = None,
    interval: float = 2.0,
) -> CommandResult:
    """Re-seal the store (``check``: only audit it), printing progress through
    ``echo`` at most every ``interval`` seconds and keeping the resume token in
    ``state_file``; the file is removed once the walk is complete."""
    if keyring is None and check:
        raise InvalidArgument("rekey --check needs sealing keys (--keys-file or the environment)")
    state = Path(state_file) if state_file is not None else None
    resume = _read_state(state)
    last = time.monotonic()

    def report_progress(done: RekeyProgress) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last < interval:
            return
        last = now
        if state is not None and not check:
            _write_state(state, done.resume)
        if echo is not None:
            echo(
                f"rekey: {done.threads:,} threads, {done.records:,} checkpoints, "
                f"re-sealed {done.resealed:,}, skipped {done.skipped:,}; "
                f"durable records re-sealed {done.runs_resealed:,}, busy {done.busy:,}; "
                f"events re-sealed {done.events_resealed:,}"
            )

    report = await rekey(
        open_store, keyring, resume=resume, progress=report_progress, check_only=check
    )
    if state is not None and not check:
        state.unlink(missing_ok=True)
    failed = report.left_count > 0 or bool(report.unreadable) or bool(report.busy)
    return CommandResult(
        EXIT_LEFT if failed else 0, _text(report, keyring, check), _data(report, keyring, check)
    )


def _read_state(state: Path | None) -> str | None:
    if state is None or not state.exists():
        return None
    token = state.read_text(encoding="ascii").strip()
    return token or None


def _write_state(state: Path, token: str) -> None:
    scratch = state.with_name(f".{state.name}.tmp")
    scratch.write_text(token + "\n", encoding="ascii")
    os.replace(scratch, state)


def _key_name(key_id: str | None) -> str:
    return "plaintext" if key_id is None else key_id


def _by_key(by_key: dict[str | None, int]) -> str:
    found = ", ".join(
        f"{_key_name(k)} {n:,}" for k, n in sorted(by_key.items(), key=lambda kv: _key_name(kv[0]))
    )
    return found or "none"


def _where(left: LeftRecord) -> str:
    if left.kind == "record":
        return f"record of {left.thread!r}"
    if left.kind == "event":
        return f"event {left.event_id!r} of {left.thread!r}"
    return f"thread {left.thread!r} step {left.step}"


def _part_line(
    name: str, counts: PartCounts, keyring: KeyRing | None, *, wrote: bool, extra: str = ""
) -> str:
    """One line for durable records or events: read, written (when the walk
    writes them), and by key as found (with keys)."""
    line = f"{name}: {counts.found:,}"
    if wrote:
        line += f"; {'re-sealed' if keyring else 're-written'} {counts.resealed:,}{extra}"
    if keyring is not None:
        line += f" (by key as found: {_by_key(counts.by_key)})"
    return line


def _text(report: RekeyReport, keyring: KeyRing | None, check: bool) -> str:
    verb = "checked" if check else "rekey"
    lines = [f"{verb}: {report.threads:,} threads, {report.records:,} checkpoints"]
    if not check:
        lines[0] += (
            f"; {'re-sealed' if keyring else 're-written'} {report.resealed:,}, "
            f"skipped {report.skipped:,} (written meanwhile; the newer write stands)"
        )
    if keyring is not None:
        lines.append(f"checkpoints by key as found: {_by_key(report.by_key)}")
    busy = f", skipped {report.runs_skipped:,}, busy {len(report.busy):,}"
    lines.append(_part_line("durable records", report.runs, keyring, wrote=not check, extra=busy))
    # Without keys events are only counted: their plain form has no envelope.
    wrote = not check and keyring is not None
    lines.append(_part_line("events", report.events, keyring, wrote=wrote))
    if report.busy:
        lines.append("busy (a live lease holds the run; run rekey again once it is released):")
        lines.extend(f"  {thread!r}" for thread in report.busy[:MAX_SHOWN])
    if keyring is not None:
        retired = len(report.retired_left)
        lines.append(
            f"left on another key than {keyring.current!r}: {report.left_count:,}"
            f" ({retired:,} listed on a retired key)"
        )
        for left in report.left:
            mark = " (retired)" if left.retired else ""
            lines.append(f"  {_where(left)}: {_key_name(left.key_id)}{mark}")
    if report.unreadable:
        lines.append(f"unreadable: {len(report.unreadable):,}")
        lines.extend(f"  {message}" for _, message in report.unreadable)
    return "\n".join(lines)


def _counts(counts: PartCounts) -> dict[str, Any]:
    return {
        "found": counts.found,
        "resealed": counts.resealed,
        "by_key": {_key_name(k): n for k, n in counts.by_key.items()},
    }


def _data(report: RekeyReport, keyring: KeyRing | None, check: bool) -> dict[str, Any]:
    return {
        "check": check,
        "current_key": keyring.current if keyring else None,
        "threads": report.threads,
        "records": report.records,
        "resealed": report.resealed,
        "skipped": report.skipped,
        "by_key": {_key_name(k): n for k, n in report.by_key.items()},
        "durable_records": {**_counts(report.runs), "skipped": report.runs_skipped},
        "events": _counts(report.events),
        "busy": report.busy,
        "left_count": report.left_count,
        "left": [
            {
                "kind": r.kind,
                "thread": r.thread,
                "step": r.step,
                "event_id": r.event_id,
                "key": r.key_id,
                "retired": r.retired,
            }
            for r in report.left
        ],
        "unreadable": [{"thread": t, "error": m} for t, m in report.unreadable],
    }
