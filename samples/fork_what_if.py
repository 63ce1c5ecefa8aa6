"""Time travel: what if the human had said no?

    python samples/fork_what_if.py

Runs the refund demo with an approval, then forks the thread at the approval
step and answers "reject" on the fork. The original thread is untouched; the
fork's first checkpoint points at its source through ``parent``.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.cli.demo import build_demo_graph, demo_input

STORE = ".runs/samples.db"


async def main(store_path: str = STORE) -> tuple[dict[str, Any], dict[str, Any]]:
    async with SqliteCheckpointer(store_path) as store:
        refunds = build_demo_graph().compile(store)
        thread = f"refund-{secrets.token_hex(3)}"
        paused = await refunds.run(demo_input("A-2002", hold_seconds=0), thread=thread)
        approval_step = paused.step
        approved = await refunds.resume(thread, "approve")
        if approved.status == "waiting":  # the zero-second hold: due at once
            approved = await refunds.resume(thread)
        what_if = f"{thread}-what-if"
        forked = await refunds.fork(thread, approval_step, new_thread=what_if)
        print(f"forked {thread}@{approval_step} -> {what_if} (parent {forked.parent})")
        rejected = await refunds.resume(what_if, "reject")
        print(f"{thread}: {approved.state['notification']}")
        print(f"{what_if}: {rejected.state['notification']}")
        only_original = sorted(set(approved.state) - set(rejected.state))
        print(f"keys only the approved run has: {only_original}")
        return dict(approved.state), dict(rejected.state)


if __name__ == "__main__":
    asyncio.run(main())
