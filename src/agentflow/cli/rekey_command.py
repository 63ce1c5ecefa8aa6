"""``agentflow rekey``: re-seal a store with the current sealing key, online.

The work is :func:`~agentflow.checkpoint.sealing.rekey_command`: every
thread's checkpoints, durable record and events. This module checks the
flags against the keys given, opens the store (never creating it) with the
codec rekey asks for (which brings its keys, and its reading of plaintext,
to records and events too), counts its threads first so progress has a
total and an ETA (a bar on a terminal, else a line on stderr every
``--interval`` seconds), and prints the report (or ``--json``) on stdout.
Ctrl-C saves the ``--state`` token and says how far it got. The exit status
is 1 while any part is left on another key, busy (a live lease holds its
run) or could not be read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.store import Store
from agentflow.cli.copy import count_threads
from agentflow.cli.errors import SealingUnavailable, UsageError
from agentflow.cli.interrupts import Continuation
from agentflow.cli.keys import KEYS_FROM, keyring_from_args, store_codec
from agentflow.cli.progress import Progress
from agentflow.cli.render import dump_json, inert_json
from agentflow.cli.session import StoreTarget, open_cli_store
from agentflow.cli.text import inert

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import RekeyProgress

__all__ = ["rekey"]


def _counts(done: RekeyProgress) -> str:
    return (
        f"{done.records:,} checkpoints, re-sealed {done.resealed:,}, skipped {done.skipped:,}; "
        f"durable records re-sealed {done.runs_resealed:,}, busy {done.busy:,}; "
        f"events re-sealed {done.events_resealed:,}"
    )


async def rekey(args: Any, continuation: Continuation) -> int:
    keyring = keyring_from_args(args)
    if keyring is None and not args.plain:
        raise UsageError(
            f"rekey needs the sealing keys ({KEYS_FROM}), or --plain to re-put unsealed records"
        )
    if keyring is not None and args.plain:
        raise UsageError("--plain re-puts records unsealed; it takes no sealing keys")
    try:
        from agentflow.checkpoint.sealing import rekey_command
    except ImportError:
        raise SealingUnavailable(
            "rekey needs the sealing extra: pip install 'agentflow-durable[sealing]' "
            "(from a clone: pip install -e '.[sealing]')"
        ) from None
    target = StoreTarget.from_args(getattr(args, "store", None), getattr(args, "namespace", None))

    def open_store(codec: CheckpointCodec) -> Store:
        return open_cli_store(target, create=False, sealing=None, codec=codec)

    async with open_store(store_codec(None)) as listed:  # listing reads no record
        total = await count_threads(listed)
    with Progress("rekey", total, every=args.interval) as progress:

        def advanced(done: RekeyProgress, before: int) -> None:
            if done.threads == 1:  # the threads a resumed run had done are not this run's speed
                progress.start = before
            progress.update(before + done.threads, _counts(done))

        kept = "" if args.state else "; without --state it starts over"
        continuation.counts = lambda: f"{progress.done:,} of {total:,} threads done{kept}"
        result = await rekey_command(
            open_store,
            keyring,
            state_file=args.state,
            check=args.check,
            interval=args.interval,
            on_progress=advanced,
        )
    if getattr(args, "json", False):
        print(inert_json(dump_json(result.data)))
    else:
        for line in result.text.split("\n"):
            print(inert(line))
    return result.status
