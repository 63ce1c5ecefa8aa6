"""``agentflow demo``: a refund-approval agent that needs no LLM and no network.

Every tool is simulated and deterministic (derived from the order id), so the
run is the same on every machine and replaying a fork gives the same states.
Its shape is the one durable agents need: two tool calls in parallel, a
human approval, a timer, a side effect, and a notification. The two effects
(the refund and the e-mail) are journaled calls (``ctx.tool``): a crash or a
resume never makes them twice, and the refund is keyed by its ``idem_`` key,
as a payment provider's idempotency key would be.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from agentflow.runtime import END, START, Graph, NodeContext, ToolCall, append

__all__ = ["DEMO_GRAPH", "build_demo_graph", "demo_input", "summarize"]

DEMO_GRAPH = "refund-approval"
CHOICES = ["approve", "reject"]


def _digest(*parts: str) -> str:
    return hashlib.sha256(":".join(parts).encode()).hexdigest()


def demo_input(order_id: str, hold_seconds: float) -> dict[str, Any]:
    """The demo's initial state."""
    return {"order_id": order_id, "hold_seconds": hold_seconds, "log": []}


async def lookup_order(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """Simulated order service."""
    cents = 1_000 + int(_digest("order", state["order_id"])[:6], 16) % 19_000
    order = {"id": state["order_id"], "item": "noise-cancelling headphones", "cents": cents}
    return {"order": order, "log": [f"looked up order {order['id']}: ${cents / 100:.2f}"]}


async def lookup_customer(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """Simulated CRM, called in the same step as the order lookup."""
    names = ["Ada Lovelace", "Grace Hopper", "Katherine Johnson", "Radia Perlman"]
    name = names[int(_digest("customer", state["order_id"])[:4], 16) % len(names)]
    return {"customer": {"name": name}, "log": [f"customer is {name}"]}


async def request_approval(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """Ask a human. On resume this node runs again and ``interrupt`` returns the answer."""
    amount = f"${state['order']['cents'] / 100:.2f}"
    decision = ctx.interrupt(
        {
            "question": f"Refund {amount} to {state['customer']['name']} "
            f"for order {state['order_id']}?",
            "choices": CHOICES,
        }
    )
    if decision not in CHOICES:
        raise ValueError(f"decision must be one of {CHOICES}, got {decision!r}")
    return {"decision": decision, "log": [f"human chose {decision}"]}


async def hold(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """A fraud-check hold: the run sleeps in the store, not in a process."""
    ctx.wait(timedelta(seconds=state["hold_seconds"]), {"reason": "refund hold"})
    return {"log": [f"hold of {state['hold_seconds']}s elapsed"]}


def _payments(call: ToolCall) -> dict[str, Any]:
    """Simulated payment provider: the refund id derives from the idempotency key,
    so a repeated request is recognised as the same refund."""
    refund_id = "rf_" + _digest("refund", call.idempotency_key)[:12]
    return {"id": refund_id, "cents": call.arguments["cents"], "status": "succeeded"}


def _mailer(call: ToolCall) -> dict[str, Any]:
    """Simulated e-mail service (not idempotent: a repeat would be a second e-mail)."""
    return {"sent_to": call.arguments["to"], "message_id": "msg_" + call.operation_id[-12:]}


async def refund(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """The payment: a journaled call, made once however often the step runs."""
    cents = state["order"]["cents"]
    arguments = {"order_id": state["order_id"], "cents": cents}
    receipt = await ctx.tool("refund", arguments, _payments, idempotent=True)
    return {"refund": receipt, "log": [f"refunded ${cents / 100:.2f} as {receipt['id']}"]}


async def notify(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """The e-mail to the customer, journaled like the refund."""
    name = state["customer"]["name"]
    if state.get("refund"):
        text = f"Dear {name}, your refund {state['refund']['id']} is on its way."
    else:
        text = f"Dear {name}, we could not approve a refund for order {state['order_id']}."
    await ctx.tool("email", {"to": name, "text": text}, _mailer)
    return {"notification": text, "log": ["customer notified"]}


def summarize(state: Mapping[str, Any]) -> str:
    """The line printed when a demo run finishes: what the customer was told."""
    return str(state.get("notification", ""))


def _after_approval(state: Mapping[str, Any]) -> str:
    return "hold" if state["decision"] == "approve" else "notify"


def build_demo_graph() -> Graph:
    """The refund-approval graph; a new description each call."""
    graph = Graph(DEMO_GRAPH, reducers={"log": append})
    graph.add_node("lookup_order", lookup_order)
    graph.add_node("lookup_customer", lookup_customer)
    graph.add_node("request_approval", request_approval)
    graph.add_node("hold", hold)
    graph.add_node("refund", refund)
    graph.add_node("notify", notify)
    graph.add_edge(START, "lookup_order")
    graph.add_edge(START, "lookup_customer")
    graph.add_edge("lookup_order", "request_approval")
    graph.add_edge("lookup_customer", "request_approval")
    graph.add_conditional_edges("request_approval", _after_approval, ["hold", "notify"])
    graph.add_edge("hold", "refund")
    graph.add_edge("refund", "notify")
    graph.add_edge("notify", END)
    return graph
