"""What agentflow's own tools see of an Agent Framework checkpoint.

The checkpoint is stored whole as codec bytes, which only the storage reads.
Beside them each record carries a small JSON view, taken from the checkpoint
at save time, so ``agentflow threads``, ``history``, ``show`` and ``diff``
say something true about a workflow without decoding it:

- ``state``: the ids and lineage (``previous_checkpoint_id``), the
  iteration, how many messages each executor has in flight, the pending
  request ids;
- ``next``: the executors the pending messages go to, ``(from X)`` for a
  message that follows X's edges, and those that wait for an answer; empty
  when nothing is left to run;
- ``interrupted`` while a ``request_info`` waits for a response, with the
  requesting executor as ``interrupt_node`` and the requests (id, executor,
  request type) as ``interrupt_payload``;
- ``ts``: the checkpoint's own timestamp, so ``prune(older_than=)`` and the
  listing's times are the framework's.
"""

from __future__ import annotations

from typing import Any

from agent_framework import WorkflowCheckpoint, WorkflowEvent, WorkflowMessage

from agentflow.checkpoint.timestamps import parse_instant
from agentflow.errors import InvalidArgument

__all__ = ["checkpoint_view"]


def _ts(value: Any) -> str:
    """The checkpoint's timestamp when agentflow can keep it as ``ts``, else "" (now)."""
    if isinstance(value, str) and value:
        try:
            if parse_instant(value) >= 0:
                return value
        except InvalidArgument:
            pass
    return ""


def _request(request_id: str, event: Any) -> dict[str, Any]:
    executor = None
    kind = None
    if isinstance(event, WorkflowEvent) and event.type == "request_info":
        kind = type(event.data).__qualname__
        try:
            executor = event.source_executor_id
        except RuntimeError:  # a request_info event without its executor
            executor = None
    return {"request_id": request_id, "executor": executor, "type": kind}


def _targets(checkpoint: WorkflowCheckpoint) -> list[str]:
    targets: set[str] = set()
    for source, messages in checkpoint.messages.items():
        for message in messages if isinstance(messages, list) else ():
            target = message.target_id if isinstance(message, WorkflowMessage) else None
            # A message without a target goes along the source's edges, which
            # only the workflow's graph knows.
            targets.add(target if isinstance(target, str) else f"(from {source})")
    return sorted(targets)


def checkpoint_view(checkpoint: WorkflowCheckpoint) -> dict[str, Any]:
    """The JSON fields of the agentflow record of ``checkpoint`` (see the module doc)."""
    requests = [
        _request(str(rid), event) for rid, event in checkpoint.pending_request_info_events.items()
    ]
    waiting = sorted({r["executor"] for r in requests if r["executor"] is not None})
    iteration = checkpoint.iteration_count
    state = {
        "workflow_name": checkpoint.workflow_name,
        "checkpoint_id": checkpoint.checkpoint_id,
        "previous_checkpoint_id": checkpoint.previous_checkpoint_id,
        "iteration_count": iteration if type(iteration) is int else None,
        "messages": {
            str(source): len(messages) if isinstance(messages, list) else 0
            for source, messages in checkpoint.messages.items()
        },
        "pending_requests": [r["request_id"] for r in requests],
    }
    view: dict[str, Any] = {
        "state": state,
        "next": tuple(sorted({*_targets(checkpoint), *waiting})),
        "ts": _ts(checkpoint.timestamp),
    }
    if requests:
        count = len(requests)
        kinds = ", ".join(sorted({r["type"] or "request" for r in requests}))
        view |= {
            "interrupted": True,
            "interrupt_node": waiting[0] if waiting else None,
            "interrupt_payload": {
                "question": f"{count} pending request{'s' * (count != 1)}: {kinds}",
                "requests": requests,
            },
        }
    return view
