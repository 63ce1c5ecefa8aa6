"""``agentflow rekey``: the command's work, apart from argument parsing.

The command line opens the store and calls :func:`rekey_command`, which runs
:func:`~agentflow.checkpoint.sealing.rekey`, saves its resume token to a
state file as it goes and when it is cut short (so an interrupted run picks
up after the last thread it finished), and returns the exit status, the text
to print and the same as JSON. The status is 1 while anything is left to
do: a part on another key, a part that could not be read, or a durable
record a live lease held (busy: run it again).

The state file holds the token and how many threads the runs before had
done (so progress counts on from there). Only its owner may read or write
it: it is written mode 0600, and one that others can read is refused.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentflow.checkpoint.sealing.keyring import DEFAULT_KEYS_VARIABLE, RETIRED_WARNING, KeyRing
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


class _NotTheRetiredWarning(logging.Filter):
    """Drops the retired-key warning: it asks for the rekey that is running."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != RETIRED_WARNING


@contextlib.contextmanager
def _quiet_retired() -> Iterator[None]:
    quiet = _NotTheRetiredWarning()
    logger = logging.getLogger("agentflow.sealing")
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


async def rekey_command(
    open_store: StoreOpener,
    keyring: KeyRing | None,
    *,
    state_file: str | os.PathLike[str] | None = None,
    check: bool = False,
    echo: Callable[[str], object] | None = None,
    interval: float = 2.0,
    on_progress: Callable[[RekeyProgress, int], object] | None = None,
) -> CommandResult:
    """Re-seal the store (``check``: only audit it), printing progress through
    ``echo`` at most every ``interval`` seconds and keeping the resume token in
    ``state_file`` (saved then, and when the walk is cut short); the file is
    removed once the walk is complete. ``on_progress(progress, before)`` is
    called after every thread, ``before`` being the threads the runs this one
    resumes had done."""
    if keyring is None and check:
        raise InvalidArgument("rekey --check needs sealing keys (--keys-file or the environment)")
    state = Path(state_file) if state_file is not None else None
    resume, before = _read_state(state)
    last = time.monotonic()
    latest: RekeyProgress | None = None

    def save() -> None:
        if state is not None and not check and latest is not None:
            _write_state(state, latest.resume, before + latest.threads)

    def report_progress(done: RekeyProgress) -> None:
        nonlocal last, latest
        latest = done
        if on_progress is not None:
            on_progress(done, before)
        now = time.monotonic()
        if now - last < interval:
            return
        last = now
        save()
        if echo is not None:
            echo(
                f"rekey: {done.threads:,} threads, {done.records:,} checkpoints, "
                f"re-sealed {done.resealed:,}, skipped {done.skipped:,}; "
                f"durable records re-sealed {done.runs_resealed:,}, busy {done.busy:,}; "
                f"events re-sealed {done.events_resealed:,}"
            )

    try:
        with _quiet_retired():
            report = await rekey(
                open_store, keyring, resume=resume, progress=report_progress, check_only=check
            )
    except BaseException:  # killed, interrupted or failed: go on from the last finished thread
        save()
        raise
    if state is not None and not check:
        state.unlink(missing_ok=True)
    failed = report.left_count > 0 or bool(report.unreadable) or bool(report.busy)
    return CommandResult(
        EXIT_LEFT if failed else 0, _text(report, keyring, check), _data(report, keyring, check)
    )


def _read_state(state: Path | None) -> tuple[str | None, int]:
    """The resume token a state file holds (None: start from the beginning), and
    the threads done before it was saved (0 in a file of an older release)."""
    if state is None or not state.exists():
        return None, 0
    with state.open("rb") as file:
        mode = os.fstat(file.fileno()).st_mode
        if mode & 0o077:
            raise InvalidArgument(
                f"the rekey state file {str(state)!r} can be read or written by others "
                f"(mode {stat.S_IMODE(mode):04o}); make it its owner's only: "
                f"chmod 600 {shlex.quote(str(state))}"
            )
        lines = file.read().decode("ascii").split()
    token = lines[0] if lines else None
    done = int(lines[1]) if len(lines) > 1 and lines[1].isdigit() else 0
    return token, done


def _write_state(state: Path, token: str, done: int) -> None:
    scratch = state.with_name(f".{state.name}.tmp")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as file:
        os.fchmod(file.fileno(), 0o600)  # a scratch file left by an older release
        file.write(f"{token}\n{done}\n")
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
