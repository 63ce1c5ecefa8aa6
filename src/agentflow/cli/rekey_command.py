"""``agentflow rekey``: re-seal a store with the current sealing key, online.

The work is :func:`~agentflow.checkpoint.sealing.rekey_command`: every
thread's checkpoints, durable record and events. This module checks the
flags against the keys given, opens the store (never creating it) with the
codec rekey asks for (which brings its keys, and its reading of plaintext,
to records and events too), prints progress on stderr and the report (or
``--json``) on stdout. The exit status is 1 while any part is left on
another key, busy (a live lease holds its run) or could not be read.
"""

from __future__ import annotations

import sys
from typing import Any

from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.store import Store
from agentflow.cli.errors import SealingUnavailable, UsageError
from agentflow.cli.keys import KEYS_FROM, keyring_from_args
from agentflow.cli.render import dump_json, inert_json
from agentflow.cli.session import StoreTarget, open_cli_store
from agentflow.cli.text import inert

__all__ = ["rekey"]


def _progress(line: str) -> None:
    print(inert(line), file=sys.stderr, flush=True)


async def rekey(args: Any) -> int:
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

    result = await rekey_command(
        open_store,
        keyring,
        state_file=args.state,
        check=args.check,
        echo=_progress,
        interval=args.interval,
    )
    if getattr(args, "json", False):
        print(inert_json(dump_json(result.data)))
    else:
        for line in result.text.split("\n"):
            print(inert(line))
    return result.status
