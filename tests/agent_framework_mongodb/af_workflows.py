"""A real Agent Framework approval workflow for the storage tests (no LLM).

``Drafter`` keeps executor state (through ``on_checkpoint_save`` and
``on_checkpoint_restore``) and writes a dataclass into workflow state;
``Approver`` pauses on ``ctx.request_info`` and, once answered, yields an
output that can only be right if every kind of state survived the restore.

``tests.agent_framework_mongodb.af_resume`` resumes a paused run of it in a fresh process.
"""

# No `from __future__ import annotations` here: Agent Framework 1.13 reads
# response-handler annotations unevaluated and rejects string annotations.

from dataclasses import dataclass, field
from typing import Any

from agent_framework import (
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    response_handler,
)

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions

WORKFLOW_NAME = "approval-workflow"
ALLOWED_TYPES = (
    "tests.agent_framework_mongodb.af_workflows:ApprovalRequest",
    "tests.agent_framework_mongodb.af_workflows:ReviewState",
)


@dataclass
class ApprovalRequest:
    title: str
    amount: int


@dataclass
class ReviewState:
    notes: list[str] = field(default_factory=list)
    approvals: int = 0


class Drafter(Executor):
    """Counts the drafts it has written; the count lives in executor state."""

    def __init__(self) -> None:
        super().__init__(id="drafter")
        self.drafts = 0

    @handler
    async def draft(self, title: str, ctx: WorkflowContext[ApprovalRequest]) -> None:
        self.drafts += 1
        ctx.set_state("review", ReviewState(notes=[f"drafted {title}"]))
        await ctx.send_message(ApprovalRequest(title=title, amount=len(title) * 100))

    async def on_checkpoint_save(self) -> dict[str, Any]:
        return {"drafts": self.drafts}

    async def on_checkpoint_restore(self, state: dict[str, Any]) -> None:
        self.drafts = state["drafts"]


class Approver(Executor):
    """Asks a human; the output combines the answer with the restored state."""

    def __init__(self, drafter: Drafter) -> None:
        super().__init__(id="approver")
        self._drafter = drafter

    @handler
    async def ask(self, request: ApprovalRequest, ctx: WorkflowContext[ApprovalRequest]) -> None:
        await ctx.request_info(request, str)

    @response_handler
    async def decide(
        self, original: ApprovalRequest, answer: str, ctx: WorkflowContext[str, str]
    ) -> None:
        review: ReviewState = ctx.get_state("review")
        verdict = f"{original.title}:{original.amount}:{answer}"
        await ctx.yield_output(f"{verdict}|{review.notes[0]}|drafts={self._drafter.drafts}")


def build_workflow(storage: MongoDBCheckpointStorage) -> Workflow:
    drafter = Drafter()
    approver = Approver(drafter)
    return (
        WorkflowBuilder(name=WORKFLOW_NAME, start_executor=drafter, checkpoint_storage=storage)
        .add_edge(drafter, approver)
        .build()
    )


def options(
    tenant: str, session: str, database: str, collection: str
) -> MongoDBCheckpointStorageOptions:
    return MongoDBCheckpointStorageOptions(
        tenant_id=tenant,
        application_id="application-1",
        workflow_name=WORKFLOW_NAME,
        session_id=session,
        database_name=database,
        collection_name=collection,
        allowed_checkpoint_types=ALLOWED_TYPES,
    )
