"""One store, three frameworks: an agentflow runtime run, a LangGraph graph and an
Agent Framework workflow, each paused on a human, in one namespace of one store.

``refund_graph`` is the runtime's graph, registered with the command line as
``--graph tests.integrations.three_frameworks:refund_graph``; ``pause_all``
starts the three runs; ``resume_all`` finishes them on any store (a copy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.types import Command

from agentflow.checkpoint import open_store
from agentflow.integrations.langgraph import AgentflowSaver
from agentflow.runtime import END, START, Graph, NodeContext, append
from tests.integrations import agent_framework_workflows as flows
from tests.integrations import langgraph_graphs

__all__ = ["AF_THREAD", "LANGGRAPH_THREAD", "RUNTIME_THREAD", "pause_all", "refund_graph"]

RUNTIME_THREAD = "refund-1"
LANGGRAPH_THREAD = "langgraph-approval-1"
#: An Agent Framework workflow's thread is its name (no session here).
AF_THREAD = flows.WORKFLOW_NAME


async def _draft(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"draft": f"refund order {state['order']}?", "log": ["drafted"]}


async def _approve(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    answer = ctx.interrupt({"question": state["draft"], "choices": ["yes", "no"]})
    return {"approved": answer == "yes", "log": [f"human said {answer}"]}


def refund_graph() -> Graph:
    """draft -> approve (asks a human) -> end."""
    graph = Graph("three-frameworks-refund", reducers={"log": append})
    graph.add_node("draft", _draft).add_node("approve", _approve)
    graph.add_edge(START, "draft").add_edge("draft", "approve").add_edge("approve", END)
    return graph


async def pause_all(url: str, namespace: str) -> None:
    """Start the three runs in ``namespace`` of the store at ``url``; each waits for a human."""
    async with open_store(url, namespace=namespace) as checkpointer:
        refunds = refund_graph().compile(checkpointer)
        result = await refunds.run({"order": "A-1", "log": []}, thread=RUNTIME_THREAD)
        assert result.status == "interrupted", result.status
        graph = langgraph_graphs.approval_graph(AgentflowSaver(checkpointer))
        config = {"configurable": {"thread_id": LANGGRAPH_THREAD}}
        paused = await graph.ainvoke({"topic": "otters"}, config)
        assert "__interrupt__" in paused
        await flows.pause(flows.storage_on(checkpointer, None))


async def resume_all(url: str, namespace: str) -> dict[str, Any]:
    """Answer the LangGraph graph and the Agent Framework workflow on the store at ``url``."""
    async with open_store(url, namespace=namespace) as checkpointer:
        graph = langgraph_graphs.approval_graph(AgentflowSaver(checkpointer))
        config = {"configurable": {"thread_id": LANGGRAPH_THREAD}}
        langgraph_done = await graph.ainvoke(Command(resume="yes"), config)
        workflow = await flows.resume(flows.storage_on(checkpointer, None), "approve")
        return {"langgraph": langgraph_done["log"], "agent_framework": workflow["outputs"]}
