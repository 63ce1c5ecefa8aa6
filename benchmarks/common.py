"""Timing helpers and the table every benchmark module returns."""

from __future__ import annotations

import random
import statistics
import string
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Table:
    """One printed table: a title, column headers, rows, and footnotes."""

    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        lines.append("| " + " | ".join(self.headers) + " |")
        lines.append(
            "|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.headers))) + "|"
        )
        lines.extend("| " + " | ".join(row) + " |" for row in self.rows)
        if self.notes:
            lines.append("")
            lines.extend(f"- {note}" for note in self.notes)
        return "\n".join(lines) + "\n"


def nested_state(step: int, size: int = 10_000, seed: int = 7) -> dict[str, Any]:
    """A ~``size``-byte nested, agent-like state (messages, tool results, scratch)."""
    rng = random.Random(seed * 1_000_003 + step)
    messages = []
    total = 0
    while total < size:
        text = "".join(rng.choices(string.ascii_letters + " ", k=rng.randint(40, 200)))
        messages.append(
            {
                "role": rng.choice(["user", "assistant", "tool"]),
                "content": text,
                "meta": {
                    "tokens": rng.randint(1, 500),
                    "ok": rng.random() > 0.1,
                    "tags": ["a", "b"],
                },
            }
        )
        total += len(text) + 60
    return {
        "step": step,
        "messages": messages,
        "scratch": {"counter": step, "plan": ["look", "act"]},
    }


async def time_calls(fn: Callable[[], Awaitable[Any]], count: int) -> list[float]:
    """Run ``fn`` ``count`` times; return each call's seconds."""
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return samples


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def rate(count: int, seconds: float) -> str:
    return f"{count / seconds:,.0f}/s"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


class LangGraphWriter:
    """Puts one LangGraph checkpoint per step, each the child of its thread's previous one.

    Every LangGraph contestant writes the same way, so their rows compare the
    savers, not four spellings of the workload. ``versioned`` also declares the
    state channel's new version, which savers that store channel blobs apart
    (PostgreSQL) need to store the state at all.
    """

    def __init__(
        self, saver: Any, states: list[dict[str, Any]], *, versioned: bool = False
    ) -> None:
        self.saver, self.states, self.versioned = saver, states, versioned
        self.parents: dict[str, str] = {}

    async def put(self, thread: str, step: int) -> None:
        from langgraph.checkpoint.base import empty_checkpoint

        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"state": self.states[step]}
        versions: dict[str, Any] = {"state": step + 1} if self.versioned else {}
        if self.versioned:
            checkpoint["channel_versions"] = versions
        configurable = {"thread_id": thread, "checkpoint_ns": ""}
        if thread in self.parents:
            configurable["checkpoint_id"] = self.parents[thread]
        config: Any = {"configurable": configurable}
        await self.saver.aput(config, checkpoint, {"step": step}, versions)
        self.parents[thread] = checkpoint["id"]
