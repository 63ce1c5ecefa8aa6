"""Fork: a new thread from any stored checkpoint, re-routed after an update.

A checkpoint's frontier (``next``) was chosen by the routers of the nodes that
produced it, from the state they produced. A fork that changes the state
therefore asks those routers again, so the fork goes where the edited state
leads: forking the approval step with ``{"decision": "reject"}`` takes the
reject branch. When the route comes out the same, the fork keeps its source's
suspend (the node asks again on resume); when it changes, the suspend belonged
to the old route and the fork simply runs the new frontier on resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.timestamps import utc_now_iso
from agentflow.runtime.errors import CannotReroute
from agentflow.runtime.section import RUNTIME_KEY, runtime_of
from agentflow.runtime.spec import START
from agentflow.runtime.steps import StepRunner

__all__ = ["fork_checkpoint", "routed_by"]


async def _previous(store: Checkpointer, cp: Checkpoint) -> Checkpoint | None:
    """The checkpoint whose step produced ``cp`` (across a fork), if stored."""
    while cp.parent:
        thread, _, step = cp.parent.rpartition(":")
        if not step.isdigit():
            return None
        parent = await store.get(thread, int(step))
        if parent is None:
            return None
        if parent.step < cp.step:
            return parent
        cp = parent  # a fork's first checkpoint names the one it copies
    return None


async def routed_by(store: Checkpointer, cp: Checkpoint) -> tuple[str, ...]:
    """The nodes whose routing chose ``cp``'s frontier (``START`` for step 0).

    A suspend repeats the frontier of the step before it, so the search starts
    at the last checkpoint that is not a suspend. Raises
    :class:`CannotReroute` when the checkpoint that holds the answer is pruned.
    """
    routed = cp
    while routed.interrupted:
        previous = await _previous(store, routed)
        if previous is None:
            raise CannotReroute(
                f"thread {cp.thread!r} step {cp.step}: the steps before it are pruned, so its "
                "route cannot be chosen again; fork with reroute=False to keep it"
            )
        routed = previous
    if routed.step == 0:
        return (START,)
    previous = await _previous(store, routed)
    if previous is None:
        raise CannotReroute(
            f"thread {cp.thread!r} step {routed.step - 1} is pruned, so the route of step "
            f"{cp.step} cannot be chosen again; fork with reroute=False to keep it"
        )
    return previous.next


async def fork_checkpoint(
    runner: StepRunner,
    source: Checkpoint,
    *,
    new_thread: str,
    update: Mapping[str, Any] | None,
    reroute: bool,
) -> Checkpoint:
    """The first checkpoint of a fork of ``source`` (not stored yet)."""
    section = {k: v for k, v in runtime_of(source).items() if k != "claim"}
    section["graph"] = runner.graph.name
    state: Mapping[str, Any] = source.state
    frontier = source.next
    if update:
        state = runner.merge(source.state, [("fork", update)], new_thread, source.step)
        if reroute:
            producers = await routed_by(runner.checkpointer, source)
            frontier = await runner.successors(producers, state, new_thread, source.step)
    keeps_suspend = source.interrupted and frontier == source.next
    return Checkpoint(
        thread=new_thread,
        step=source.step,
        state=state,
        next=frontier,
        parent=f"{source.thread}:{source.step}",
        ts=utc_now_iso(),
        interrupted=keeps_suspend,
        interrupt_node=source.interrupt_node if keeps_suspend else None,
        interrupt_payload=source.interrupt_payload if keeps_suspend else None,
        wake_at=source.wake_at if keeps_suspend else None,
        extra={
            **source.extra,
            RUNTIME_KEY: section if keeps_suspend else {"graph": runner.graph.name},
        },
        revision=1,
    )
