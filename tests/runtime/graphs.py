"""Small deterministic graphs shared by the runtime and CLI tests.

Importable by child processes (``--graph tests.runtime.graphs:NAME``), so
crash, worker and command-line tests run the very same code.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from agentflow.runtime import END, START, Graph, NodeContext, append


def _chain(previous: str, item: object) -> str:
    return hashlib.sha256(f"{previous}|{item}".encode()).hexdigest()[:16]


async def _tick(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    await asyncio.sleep(state.get("delay", 0))
    return {"i": state["i"] + 1, "chain": _chain(state["chain"], state["i"])}


async def _left(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"log": [f"L{state['i']}"]}


async def _right(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    await asyncio.sleep(state.get("delay", 0))
    return {"log": [f"R{state['i']}"], "total": state["total"] + state["i"]}


def _again(state: Mapping[str, Any]) -> str:
    return "tick" if state["i"] < state["n"] else END


def counter_graph() -> Graph:
    """tick -> (left | right) -> tick ... until i == n; a fan-out every round."""
    graph = Graph("counter", reducers={"log": append})
    graph.add_node("tick", _tick).add_node("left", _left).add_node("right", _right)
    graph.add_edge(START, "tick").add_edge("tick", "left").add_edge("tick", "right")
    graph.add_conditional_edges("right", _again, ["tick", END])
    return graph


def counter_input(n: int, delay: float = 0.0) -> dict[str, Any]:
    return {"i": 0, "n": n, "chain": "", "log": [], "total": 0, "delay": delay}


async def _prepare(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"prepared": True, "log": ["prepare"]}


async def _ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    answer = ctx.interrupt({"question": "ok?", "choices": ["yes", "no"]})
    return {"answer": answer, "log": [f"answer {answer}"]}


async def _finish(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"log": ["finish"]}


def approval_graph() -> Graph:
    """prepare -> ask (human interrupt) -> finish."""
    graph = Graph("approval", reducers={"log": append})
    graph.add_node("prepare", _prepare).add_node("ask", _ask).add_node("finish", _finish)
    graph.add_edge(START, "prepare").add_edge("prepare", "ask").add_edge("ask", "finish")
    graph.add_edge("finish", END)
    return graph


async def _sleep(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    ctx.wait(timedelta(seconds=state.get("seconds", 0)), {"why": "test"})
    return {"woke": True}


async def _record(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """A side effect that must happen once per thread: one line in a shared file."""
    fd = os.open(state["logfile"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{ctx.thread} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    return {"recorded": True}


def timer_graph() -> Graph:
    """sleep (timer wait) -> record (side effect) -> END."""
    graph = Graph("timer")
    graph.add_node("sleep", _sleep).add_node("record", _record)
    graph.add_edge(START, "sleep").add_edge("sleep", "record").add_edge("record", END)
    return graph
