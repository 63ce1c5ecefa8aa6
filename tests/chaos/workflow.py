"""The chaos workflow, its ledger (the outside world) and the trace of where a process is.

``order`` makes five journaled calls over five steps, with a timer wait before
the first and one inside the fourth (so a cycle ends mid-run and the settled
model call is carried past it)::

    due (wait) -> plan (model) -> charge (tool) -> reserve (idempotent tool)
       -> confirm (model, then a short wait) -> email (tool) -> END

The ledger is a SQLite file outside every store, as a payment provider would
be: ``effects`` holds one row per effect of the non-idempotent tools, with no
uniqueness, so a duplicate shows; ``reservations`` is keyed by the ``idem_``
key (a repeated call lands nothing new); ``calls`` holds every invocation of
every call, written before its effect. A non-idempotent request that reaches
the ledger later than :data:`DEADLINE` after it was sent is refused (as a
provider refuses an expired request), so nothing a stalled holder sent can
land after its lease lapsed (the runtime sends a call only on a lease it knows is
live for a third of its length more, so DEADLINE must be shorter than that);
see docs/durable.md, "Chaos".

The trace (``AGENTFLOW_CHAOS_TRACE``, one file per process) gets a line at
every point a kill is classified by: the last line before a SIGKILL says
where the process died.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import random
import sqlite3
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from agentflow.runtime import END, START, Durability, Graph, ModelCall, NodeContext, ToolCall

__all__ = [
    "DEADLINE",
    "NON_IDEMPOTENT",
    "TRACE_ENV",
    "Ledger",
    "mark",
    "order_graph",
    "order_input",
]

#: How long a non-idempotent request stays valid after it was sent.
DEADLINE = 0.25
#: The tools whose effect must land at most once, whatever happens.
NON_IDEMPOTENT = ("charge", "email")
TRACE_ENV = "AGENTFLOW_CHAOS_TRACE"
#: Longest pause (seconds) put before and inside each call, so kills land there.
JITTER = 0.02

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    id INTEGER PRIMARY KEY, tool TEXT NOT NULL, thread TEXT NOT NULL,
    operation TEXT NOT NULL, attempt INTEGER NOT NULL, idem TEXT NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS reservations (
    idem TEXT PRIMARY KEY, thread TEXT NOT NULL, operation TEXT NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, thread TEXT NOT NULL,
    operation TEXT NOT NULL, attempt INTEGER NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY, thread TEXT NOT NULL, operation TEXT NOT NULL,
    attempt INTEGER NOT NULL, decision TEXT NOT NULL);
"""


class Ledger:
    """The outside world's books, shared by every process (one SQLite file, WAL)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def rows(self, query: str, *args: object) -> list[tuple[Any, ...]]:
        return self._db.execute(query, args).fetchall()

    def called(self, kind: str, name: str, thread: str, operation: str, attempt: int) -> None:
        self._db.execute(
            "INSERT INTO calls (kind, name, thread, operation, attempt, pid) VALUES (?,?,?,?,?,?)",
            (kind, name, thread, operation, attempt, os.getpid()),
        )

    def effect(self, call: ToolCall, thread: str, sent: float) -> int:
        """Land one non-idempotent effect (a new row every time), unless the request expired."""
        db, pid = self._db, os.getpid()
        db.execute("BEGIN IMMEDIATE")
        try:
            if time.monotonic() - sent > DEADLINE:
                raise TimeoutError(f"{call.name} request expired before it reached the ledger")
            row = db.execute(
                "INSERT INTO effects (tool, thread, operation, attempt, idem, pid) "
                "VALUES (?,?,?,?,?,?)",
                (call.name, thread, call.operation_id, call.attempt, call.idempotency_key, pid),
            ).lastrowid
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        assert row is not None
        return row

    def reserve(self, call: ToolCall, thread: str) -> str:
        """Land the idempotent effect once per ``idem_`` key."""
        self._db.execute(
            "INSERT OR IGNORE INTO reservations (idem, thread, operation, pid) VALUES (?,?,?,?)",
            (call.idempotency_key, thread, call.operation_id, os.getpid()),
        )
        return call.idempotency_key

    def landed(self, idem: str) -> int | None:
        """The effect a non-idempotent call with this ``idem_`` key left, if any."""
        found = self.rows("SELECT id FROM effects WHERE idem = ?", idem)
        return int(found[0][0]) if found else None

    def decided(self, thread: str, operation: str, attempt: int, decision: str) -> None:
        self._db.execute(
            "INSERT INTO decisions (thread, operation, attempt, decision) VALUES (?,?,?,?)",
            (thread, operation, attempt, decision),
        )


@functools.cache
def _ledger(path: str) -> Ledger:
    """This process's connection to the ledger at ``path``."""
    return Ledger(path)


@functools.cache
def _trace(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def mark(*words: object) -> None:
    """One trace line (one ``write``), if this process keeps a trace."""
    path = os.environ.get(TRACE_ENV)
    if path:
        os.write(_trace(path), (" ".join(map(str, words)) + "\n").encode())


async def _pause() -> None:
    await asyncio.sleep(random.uniform(0, JITTER))


def _tool(name: str, thread: str, ledger: str) -> Any:
    """The function behind ``ctx.tool(name, ...)``: invocation, pause, effect, pause.

    Traced as ``sent`` (before the effect), ``landed`` (after it) and
    ``returned``: a process killed before ``returned`` died before the
    runtime could journal a receipt, so the call must come back ambiguous.
    """

    async def call(request: ToolCall) -> dict[str, Any]:
        sent = time.monotonic()
        books = _ledger(ledger)
        books.called("tool", name, thread, request.operation_id, request.attempt)
        mark("call", name, thread, request.operation_id, request.attempt, "sent")
        await _pause()
        if name in NON_IDEMPOTENT:
            receipt: dict[str, Any] = {"effect": books.effect(request, thread, sent)}
        else:
            receipt = {"reserved": books.reserve(request, thread)}
        mark("call", name, thread, request.operation_id, request.attempt, "landed")
        await _pause()
        mark("call", name, thread, request.operation_id, request.attempt, "returned")
        return receipt

    return call


def _model(name: str, thread: str, ledger: str) -> Any:
    async def call(request: ModelCall) -> dict[str, Any]:
        _ledger(ledger).called("model", name, thread, request.operation_id, request.attempt)
        mark("call", name, thread, request.operation_id, request.attempt, "sent")
        await _pause()
        mark("call", name, thread, request.operation_id, request.attempt, "landed")
        await _pause()
        mark("call", name, thread, request.operation_id, request.attempt, "returned")
        return {"text": f"{name} for {thread}"}

    return call


async def _due(state: Mapping[str, Any], ctx: NodeContext) -> None:
    ctx.wait(timedelta(0))


def _node(name: str, calls: str, *, wait: timedelta | None = None) -> Any:
    """A step that makes one call (``model`` or ``tool``/``idempotent``) between pauses."""

    async def node(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        thread, ledger = ctx.thread, state["ledger"]
        mark("node", name, thread, "enter")
        await _pause()
        if calls == "model":
            request = {"model": "chaos-model", "messages": [{"role": "user", "content": name}]}
            receipt = await ctx.model(request, _model(name, thread, ledger))
        else:
            arguments = {"order": thread, "cents": 700}
            fn = _tool(name, thread, ledger)
            receipt = await ctx.tool(name, arguments, fn, idempotent=calls == "idempotent")
        mark("node", name, thread, "called")
        if wait is not None:
            ctx.wait(wait)
        await _pause()
        mark("node", name, thread, "exit")
        return {name: receipt}

    return node


def order_graph() -> Graph:
    """The chaos workflow (see the module docstring)."""
    durability = Durability(
        ambiguous_model_policy="retry_with_duplicate_risk",
        ambiguous_tool_policy="retry_idempotent_only",
    )
    graph = Graph("chaos-order", durability=durability).add_node("due", _due)
    graph.add_node("plan", _node("plan", "model"))
    graph.add_node("charge", _node("charge", "tool"))
    graph.add_node("reserve", _node("reserve", "idempotent"))
    graph.add_node("confirm", _node("confirm", "model", wait=timedelta(milliseconds=50)))
    graph.add_node("email", _node("email", "tool"))
    order = [START, "due", "plan", "charge", "reserve", "confirm", "email", END]
    for left, right in itertools.pairwise(order):
        graph.add_edge(left, right)
    return graph


def order_input(ledger: str | os.PathLike[str]) -> dict[str, Any]:
    return {"ledger": str(ledger)}
