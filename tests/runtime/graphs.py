"""Small deterministic graphs shared by the runtime and CLI tests.

Importable by child processes (``--graph tests.runtime.graphs:NAME``), so
crash, worker and command-line tests run the very same code.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from agentflow.runtime import END, START, Graph, NodeContext, ToolCall, append


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


def append_line(path: str, line: str) -> None:
    """One line appended with one write (O_APPEND), safe between processes."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


async def _sleep(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    ctx.wait(timedelta(seconds=state.get("seconds", 0)), {"why": "test"})
    return {"woke": True}


async def _record(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """A side effect that must happen once per thread: one line in a shared file."""
    append_line(state["logfile"], f"{ctx.thread} {os.getpid()}")
    return {"recorded": True}


def timer_graph() -> Graph:
    """sleep (timer wait) -> record (side effect) -> END."""
    graph = Graph("timer")
    graph.add_node("sleep", _sleep).add_node("record", _record)
    graph.add_edge(START, "sleep").add_edge("sleep", "record").add_edge("record", END)
    return graph


def ledger_entry(call: ToolCall) -> dict[str, Any]:
    """The non-idempotent effect: one line per call in the ledger file it names."""
    line = f"{call.arguments['thread']} {call.idempotency_key} {os.getpid()}"
    append_line(call.arguments["ledger"], line)
    return {"charged": call.arguments["cents"]}


def ledger_lines(ledger: str | os.PathLike[str]) -> list[str]:
    """The ledger's lines (none when nothing was ever charged)."""
    try:
        with open(ledger) as lines:
            return lines.read().splitlines()
    except FileNotFoundError:
        return []


async def _due(state: Mapping[str, Any], ctx: NodeContext) -> None:
    ctx.wait(timedelta(0))


async def _slow_charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """Slower than the lease (``slow`` seconds), then one charge."""
    await asyncio.sleep(state["slow"])
    arguments = {"ledger": state["ledger"], "thread": ctx.thread, "cents": 500}
    return {"receipt": await ctx.tool("charge", arguments, ledger_entry)}


def slow_charge_graph() -> Graph:
    """due (timer, at once) -> slow_charge (sleeps, then charges once) -> END."""
    graph = Graph("slow-charge").add_node("due", _due).add_node("slow_charge", _slow_charge)
    graph.add_edge(START, "due").add_edge("due", "slow_charge").add_edge("slow_charge", END)
    return graph


async def _prepare_charge(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    return {"prepared": True}


async def _charge_unless_dying(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    """The first run of this step kills its own process before it calls anything."""
    try:  # the marker is made once, atomically: O_EXCL
        os.close(os.open(f"{state['ledger']}.died", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass
    else:
        os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(state.get("slow", 0))
    arguments = {"ledger": state["ledger"], "thread": ctx.thread, "cents": 700}
    return {"receipt": await ctx.tool("charge", arguments, ledger_entry)}


def dies_between_steps_graph() -> Graph:
    """prepare -> charge (its first run dies before it calls anything) -> END."""
    graph = Graph("dies-between-steps")
    graph.add_node("prepare", _prepare_charge).add_node("charge", _charge_unless_dying)
    graph.add_edge(START, "prepare").add_edge("prepare", "charge").add_edge("charge", END)
    return graph


def _charges_then_loses_the_reply(call: ToolCall) -> dict[str, Any]:
    """Charges, then (the first time only) the connection drops before the reply."""
    receipt = ledger_entry(call)
    try:
        os.close(os.open(f"{call.arguments['ledger']}.lost", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return receipt
    raise ConnectionResetError("the connection dropped after the request was sent")


async def _charge_once(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    arguments = {"ledger": state["ledger"], "thread": ctx.thread, "cents": 700}
    return {"receipt": await ctx.tool("charge", arguments, _charges_then_loses_the_reply)}


def lost_reply_graph() -> Graph:
    """charge (its first reply is lost after it charged: ambiguous) -> END."""
    graph = Graph("lost-reply").add_node("charge", _charge_once)
    return graph.add_edge(START, "charge").add_edge("charge", END)
