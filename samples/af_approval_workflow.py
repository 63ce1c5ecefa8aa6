"""Human approval across processes: pause in one, resume in another, through MongoDB.

    MONGODB_URI=mongodb://localhost:27017 python samples/af_approval_workflow.py

runs both halves: this process starts an expense workflow that pauses for a
manager's approval, then a second Python process (``resume``) loads the
pending request from MongoDB, answers it and finishes the run. The halves
can also be run by hand, hours apart:

    python samples/af_approval_workflow.py start                   # prints SESSION
    python samples/af_approval_workflow.py resume SESSION approve  # or reject

Nothing is shared between the processes except MongoDB.
"""

# No `from __future__ import annotations` here: Agent Framework 1.13 reads
# response-handler annotations unevaluated and rejects string annotations.

import asyncio
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass

from agent_framework import (
    Executor,
    Workflow,
    WorkflowBuilder,
    WorkflowContext,
    handler,
    response_handler,
)

from agent_framework_mongodb import MongoDBCheckpointStorage, MongoDBCheckpointStorageOptions

WORKFLOW_NAME = "expense-approval"


@dataclass
class ExpenseReport:
    employee: str
    amount: int


@dataclass
class ApprovalRequest:
    summary: str
    amount: int


class Intake(Executor):
    @handler
    async def receive(self, report: ExpenseReport, ctx: WorkflowContext[ApprovalRequest]) -> None:
        summary = f"{report.employee} claims {report.amount} EUR"
        await ctx.send_message(ApprovalRequest(summary=summary, amount=report.amount))


class ManagerApproval(Executor):
    @handler
    async def ask(self, request: ApprovalRequest, ctx: WorkflowContext[ApprovalRequest]) -> None:
        # The run pauses here; the checkpoint saved now holds the pending request.
        await ctx.request_info(request, str)

    @response_handler
    async def decide(
        self, request: ApprovalRequest, decision: str, ctx: WorkflowContext[str, str]
    ) -> None:
        await ctx.yield_output(f"{request.summary}: {decision.upper()}")


def build(storage: MongoDBCheckpointStorage) -> Workflow:
    intake, manager = Intake(id="intake"), ManagerApproval(id="manager")
    builder = WorkflowBuilder(name=WORKFLOW_NAME, start_executor=intake, checkpoint_storage=storage)
    return builder.add_edge(intake, manager).build()


def storage_for(session_id: str) -> MongoDBCheckpointStorage:
    options = MongoDBCheckpointStorageOptions(
        tenant_id="acme",
        application_id="expenses",
        workflow_name=WORKFLOW_NAME,  # must equal WorkflowBuilder(name=...)
        session_id=session_id,  # one storage per run
        database_name="agentflow_samples",
        collection_name="workflow_checkpoints",
        # Application classes inside checkpoints must be listed to be loadable.
        allowed_checkpoint_types=("__main__:ExpenseReport", "__main__:ApprovalRequest"),
    )
    return MongoDBCheckpointStorage(options, connection_string=os.environ["MONGODB_URI"])


async def start() -> str:
    session_id = f"expense-{uuid.uuid4().hex[:8]}"
    async with storage_for(session_id) as storage:
        await storage.ensure_indexes()  # provisioning; normally a deploy step
        result = await build(storage).run(ExpenseReport(employee="Ada", amount=420))
        (request,) = result.get_request_info_events()
        print(f"[start]  paused for approval: {request.data.summary} (session {session_id})")
    return session_id


async def resume(session_id: str, decision: str) -> None:
    async with storage_for(session_id) as storage:
        checkpoint = await storage.get_latest(workflow_name=WORKFLOW_NAME)
        if checkpoint is None or not checkpoint.pending_request_info_events:
            raise SystemExit(f"no paused run for session {session_id}")
        pending = {request_id: decision for request_id in checkpoint.pending_request_info_events}
        result = await build(storage).run(responses=pending, checkpoint_id=checkpoint.checkpoint_id)
        print(f"[resume] process {os.getpid()} finished: {result.get_outputs()[0]}")
        cleared = await storage.clear_run()  # the run is complete: drop its checkpoints
        print(f"[resume] cleared {cleared.checkpoints_deleted} checkpoints")


def main(argv: list[str]) -> None:
    if "MONGODB_URI" not in os.environ:
        raise SystemExit("set MONGODB_URI, e.g. mongodb://localhost:27017")
    if argv[:1] == ["start"]:
        print(asyncio.run(start()))
    elif argv[:1] == ["resume"] and len(argv) == 3:
        asyncio.run(resume(argv[1], argv[2]))
    elif not argv:
        session_id = asyncio.run(start())
        print(f"[start]  process {os.getpid()} exits; a new process resumes the run")
        subprocess.run([sys.executable, __file__, "resume", session_id, "approve"], check=True)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
