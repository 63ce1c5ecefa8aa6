"""Store content chosen by an attacker: ids, questions and state a terminal
would act on, for the tests that check every command shows them inert."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentflow.runtime import END, START, Graph, NodeContext

#: Each would do something on a terminal (or in rich) if printed raw.
HOSTILE = [
    "clear\x1b[2Jscreen",
    "link\x1b]8;;https://evil.example\x07click\x1b]8;;\x07",
    "[bold red]markup[/]",
    ":warning: emoji",
    "bidi\u202etxt.exe",
    "c1\x9b31mred",
    "line\nbreak",
]
#: All of them in one thread id, for the commands that take one thread.
COMBINED = " ".join(HOSTILE)
#: Bytes that must never reach the terminal from store content.
RAW = ["\x1b[2J", "\x1b]8", "\x07", "\u202e", "\x9b", "\x1b[31m"]


async def _ask(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
    answer = ctx.interrupt({"question": state["question"], "choices": [state["question"], "no"]})
    return {"answer": answer, "note": state["question"]}


def graph() -> Graph:
    """ask (a human interrupt whose question is hostile) -> END."""
    built = Graph("hostile")
    built.add_node("ask", _ask).add_edge(START, "ask").add_edge("ask", END)
    return built
