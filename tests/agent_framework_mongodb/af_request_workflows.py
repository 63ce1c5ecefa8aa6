"""Two real Agent Framework workflows that pause on ``request_info``, for both storages.

``dict_workflow`` asks with a plain dict and ``dict`` as the response type,
so its paused checkpoint holds the class ``dict`` itself (and, in its
executor state, the type hints ``dict[str, int]`` and ``str | None``): the
save that seed 000's codec used to refuse. ``refused_workflow`` asks with a
request object of a class no storage lists, so its paused checkpoint is
refused: Agent Framework only logs a warning and reports the run paused.

Both live in an importable module so that their classes keep the same
``module:qualname`` (and the graphs the same signature) in the process that
resumes them; ``tests.agent_framework_mongodb.af_request_resume`` reads or
resumes a paused run on MongoDB in a fresh process.
"""

# No `from __future__ import annotations` here: Agent Framework 1.13 reads
# response-handler annotations unevaluated and rejects string annotations.

from dataclasses import dataclass
from typing import Any

from agent_framework import (
    CheckpointStorage,
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowCheckpointException,
    WorkflowContext,
    WorkflowRunState,
    handler,
    response_handler,
)

DICT_WORKFLOW = "dict-request-workflow"
REFUSED_WORKFLOW = "refused-request-workflow"
#: What dict_workflow yields once resumed with ANSWER: right only if the request,
#: its type and the executor's hint-holding state all survived the restore.
ANSWER = {"verdict": "ship", "votes": 3}
EXPECTED = "release?=ship|votes:3|hints=dict[str, int],str | None"


class DictAsker(Executor):
    """Asks with a plain dict; keeps type hints in its executor state."""

    def __init__(self) -> None:
        super().__init__(id="dict-asker")
        self.hints: list[Any] = []

    @handler
    async def ask(self, question: str, ctx: WorkflowContext) -> None:
        self.hints = [dict[str, int], str | None]
        await ctx.request_info({"question": question, "limit": 3}, dict)

    @response_handler
    async def decide(self, original: dict, answer: dict, ctx: WorkflowContext[str, str]) -> None:  # type: ignore[type-arg]
        hints = ",".join(str(hint) for hint in self.hints)
        await ctx.yield_output(
            f"{original['question']}={answer['verdict']}|votes:{answer['votes']}|hints={hints}"
        )

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"hints": self.hints}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.hints = state["hints"]


@dataclass
class UnlistedRequest:
    """A request class no storage's allowed_checkpoint_types names."""

    title: str


class UnlistedAsker(Executor):
    def __init__(self) -> None:
        super().__init__(id="unlisted-asker")

    @handler
    async def ask(self, title: str, ctx: WorkflowContext) -> None:
        await ctx.request_info(UnlistedRequest(title), str)

    @response_handler
    async def decide(
        self, original: UnlistedRequest, answer: str, ctx: WorkflowContext[str, str]
    ) -> None:
        await ctx.yield_output(f"{original.title}:{answer}")


def dict_workflow(storage: CheckpointStorage) -> Workflow:
    return WorkflowBuilder(
        name=DICT_WORKFLOW, start_executor=DictAsker(), checkpoint_storage=storage
    ).build()


def refused_workflow(storage: CheckpointStorage) -> Workflow:
    return WorkflowBuilder(
        name=REFUSED_WORKFLOW, start_executor=UnlistedAsker(), checkpoint_storage=storage
    ).build()


async def pause(workflow: Workflow, message: str) -> str:
    """Run until the workflow asks; return the request id."""
    result = await workflow.run(message)
    assert result.get_final_state() == WorkflowRunState.IDLE_WITH_PENDING_REQUESTS
    (event,) = result.get_request_info_events()
    return str(event.request_id)


async def resume_dict_workflow(storage: CheckpointStorage) -> dict[str, Any]:
    """Answer the pending request of ``get_latest``'s checkpoint; the outputs and what it held."""
    latest = await storage.get_latest(workflow_name=DICT_WORKFLOW)
    assert latest is not None, "nothing to resume"
    pending = list(latest.pending_request_info_events)
    result = await dict_workflow(storage).run(
        responses=dict.fromkeys(pending, ANSWER), checkpoint_id=latest.checkpoint_id
    )
    return {"outputs": result.get_outputs(), "resumed_from": latest.checkpoint_id}


async def latest_of_refused_workflow(storage: CheckpointStorage) -> dict[str, Any]:
    """What ``get_latest`` says of a refused_workflow run: its checkpoint, or its error."""
    try:
        latest = await storage.get_latest(workflow_name=REFUSED_WORKFLOW)
    except WorkflowCheckpointException as exc:
        stale = getattr(exc, "latest", None)
        return {
            "error": type(exc).__name__,
            "code": getattr(exc, "code", None),
            "stale_pending": None if stale is None else list(stale.pending_request_info_events),
        }
    return {
        "error": None,
        "pending": None if latest is None else list(latest.pending_request_info_events),
    }
