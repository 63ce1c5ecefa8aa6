"""Journaled external calls: what ``ctx.tool`` and ``ctx.model`` do.

A call that may not go out twice is written durably as ``started``
(planned and started in one write) under the run's lease *before* it goes
out; that is the only write it costs. Its outcome (``succeeded`` with its
receipt, ``failed`` with a typed error, ``ambiguous``) is noted in the lease
and rides the next write: the next call's ``started`` entry, or the step's
commit (one transaction with the step on the SQL stores). A call declared
``idempotent=True`` writes nothing before it goes out: after a crash it runs
again under the same ``idem_`` key, which a tool that deduplicates turns
into a no-op (DBOS's step semantics). A call found already settled in the
journal (a resumed run re-running a step) is replayed from its receipt and
not made again; so is a call a suspended node made before it suspended.

Identities are derived from where the call sits, so a re-run derives the
same ones: the node, its call key (``key=``, else ``tool-1``, ``tool-2``...
in call order within the node), the step and the claimed cycle:

* operation id ``op_{kind}_cycle_{cycle}_step_{step}_{hash(node, key)}``;
* tool call id ``{node}/{key}@{step}``, and the ``idem_`` key derived from the
  namespace, the run's own id, the cycle and that id (``run_idempotency_key``):
  stable across retries of the call, different for every step and every run
  (two tenants, or a thread deleted and run again, never share one), so a
  tool that deduplicates on it turns a retry into a no-op.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow.durable import (
    OPERATION_REQUEST_SCHEMA,
    OperationError,
    OperationJournalEntry,
    OperationKind,
    OperationState,
    ToolIdempotency,
    definitive_failure,
    operation_request_digest,
    run_idempotency_key,
    tool_request_digest,
)
from agentflow.durable.errors import DurableError
from agentflow.runtime import telemetry
from agentflow.runtime.errors import CallAmbiguous, CallFailed
from agentflow.runtime.leases import Lease
from agentflow.runtime.lifecycle import replayed
from agentflow.runtime.records import SCOPE

__all__ = [
    "CallJournal",
    "ModelCall",
    "ModelFn",
    "NodeCalls",
    "ToolCall",
    "ToolFn",
    "carried_key",
    "operation_step",
]

_MODEL_FIELDS = ("model", "messages", "settings", "tools", "output_schema", "idempotency_key")
_DEFAULTS: dict[str, Any] = {"messages": [], "settings": {}, "tools": [], "output_schema": None}
_SETTLED = frozenset({OperationState.SUCCEEDED, OperationState.FAILED})


@dataclass(frozen=True, slots=True)
class ToolCall:
    """What the function behind ``ctx.tool`` is called with."""

    name: str
    arguments: Mapping[str, Any]
    #: ``idem_...``: pass it to the tool so a repeated call is recognised.
    idempotency_key: str
    operation_id: str
    #: 1 for the first call, 2 after one retry of an ambiguous call, ...
    attempt: int
    #: The W3C trace context (``traceparent``, ``tracestate``) of the call's span,
    #: for a request that leaves the process; empty when OpenTelemetry is off.
    trace_context: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelCall:
    """What the function behind ``ctx.model`` is called with."""

    #: ``{model, messages, settings, tools, output_schema, idempotency_key}``.
    request: Mapping[str, Any]
    operation_id: str
    attempt: int
    #: As :attr:`ToolCall.trace_context`.
    trace_context: Mapping[str, str] = field(default_factory=dict)


ToolFn = Callable[[ToolCall], Awaitable[Any] | Any]
ModelFn = Callable[[ModelCall], Awaitable[Any] | Any]


def _hash(node: str, key: str) -> str:
    return hashlib.sha256(f"{node}\x00{key}".encode()).hexdigest()[:16]


def operation_step(operation_id: str) -> int | None:
    """The step an operation id of this runtime names (None for a foreign id)."""
    head, _, _ = operation_id.rpartition("_")
    _, marker, step = head.rpartition("_step_")
    return int(step) if marker and step.isdigit() else None


def carried_key(entry: OperationJournalEntry) -> str:
    """The step- and cycle-free key a suspended node's call is found by on resume."""
    return f"{entry.kind.value}:{entry.operation_id.rpartition('_')[2]}"


def model_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """The closed request projection of a model call (missing members defaulted)."""
    if not isinstance(request, Mapping):
        raise DurableError("operation_request_invalid", "a model request must be a mapping")
    unknown = sorted(set(request) - set(_MODEL_FIELDS))
    if unknown:
        raise DurableError(
            "operation_request_invalid",
            f"a model request has only {', '.join(_MODEL_FIELDS)}; got {', '.join(unknown)}",
        )
    if "model" not in request:
        raise DurableError("operation_request_invalid", "a model request names its model")
    return {name: request.get(name, _DEFAULTS.get(name)) for name in _MODEL_FIELDS}


class CallJournal:
    """The journaled calls of one claim: lookups, writes (one at a time), history.

    ``carried`` holds the settled calls of the suspend this claim resumes, by
    :func:`carried_key`; they answer calls of the first step only (the
    suspended nodes running again).
    """

    def __init__(
        self,
        lease: Lease,
        *,
        first_step: int,
        carried: Mapping[str, OperationJournalEntry],
    ) -> None:
        self.lease = lease
        self.first_step = first_step
        self.carried = dict(carried)
        #: Per step, the calls made or replayed (the checkpoint's ``operations``).
        self.by_step: dict[int, list[dict[str, Any]]] = {}
        self._lock = asyncio.Lock()

    @property
    def thread(self) -> str:
        return self.lease.stored.checkpoint_key

    @property
    def idempotency_scope(self) -> tuple[str | None, str]:
        """The namespace the run was created in and its own id, which every ``idem_``
        key of the run names (a record older than the scope names the store's)."""
        record = self.lease.stored
        scope = record.shared_state.get(SCOPE)
        namespace = scope if isinstance(scope, str) else self.lease.store.namespace
        return namespace or None, record.trace_id

    @property
    def cycle(self) -> int:
        cycle = self.lease.stored.claimed_cycle
        assert cycle is not None
        return cycle

    def find(
        self, kind: OperationKind, operation_id: str, step: int
    ) -> OperationJournalEntry | None:
        found = self.lease.find(kind, operation_id)
        if found is not None:
            return found
        if step == self.first_step:
            return self.carried.get(f"{kind.value}:{operation_id.rpartition('_')[2]}")
        return None

    async def write(self, entry: OperationJournalEntry) -> None:
        """Journal ``entry`` under the lease, with the outcomes noted before it
        (refused with ``LeaseLost`` once fenced)."""
        async with self._lock:
            await self.lease.record_operation(entry)

    def settle(self, entries: tuple[OperationJournalEntry, ...]) -> None:
        """Note the journal moves of a call that went out: they ride the next write."""
        for entry in entries:
            self.lease.note(entry)

    def note(self, step: int, entry: OperationJournalEntry, name: str, *, replayed: bool) -> None:
        call = {
            "id": entry.operation_id,
            "kind": entry.kind.value,
            "name": name,
            "state": entry.state.value,
            "attempt": entry.attempt,
            "replayed": replayed,
        }
        if entry.idempotency_key is not None:  # what the provider saw, for an audit later
            call["idempotency_key"] = entry.idempotency_key
        self.by_step.setdefault(step, []).append(call)

    def carry(self, step: int) -> dict[str, OperationJournalEntry]:
        """The settled calls to carry past a suspend at ``step``."""
        carried = dict(self.carried) if step == self.first_step else {}
        for kind in OperationKind:
            for entry in self.lease.record.journal(kind):
                if entry.state in _SETTLED and operation_step(entry.operation_id) == step:
                    carried[carried_key(entry)] = entry
        return carried


class NodeCalls:
    """The calls of one node execution: keys in call order, then the journal."""

    def __init__(self, journal: CallJournal, step: int, node: str) -> None:
        self.journal = journal
        self.step = step
        self.node = node
        self._counts = {OperationKind.TOOL: 0, OperationKind.MODEL: 0}

    def _operation(self, kind: OperationKind, key: str | None) -> tuple[str, str]:
        if key is None:
            self._counts[kind] += 1
            key = f"{kind.value}-{self._counts[kind]}"
        elif not isinstance(key, str) or not key:
            raise DurableError("operation_id_invalid", "a call key is a non-empty string")
        cycle, step = self.journal.cycle, self.step
        return key, f"op_{kind.value}_cycle_{cycle}_step_{step}_{_hash(self.node, key)}"

    async def tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        call: ToolFn,
        *,
        idempotent: bool,
        key: str | None,
    ) -> Any:
        key, operation_id = self._operation(OperationKind.TOOL, key)
        call_id = f"{self.node}/{key}@{self.step}"
        found = self.journal.find(OperationKind.TOOL, operation_id, self.step)
        if found is not None:  # keep the identity it was journaled under
            call_id = found.tool_call_id or call_id
            idem = found.idempotency_key or ""
        else:
            namespace, run_id = self.journal.idempotency_scope
            idem = run_idempotency_key(namespace, run_id, self.journal.cycle, call_id)
        digest = tool_request_digest(call_id, name, dict(arguments), idem)
        if found is None:
            support = ToolIdempotency.SUPPORTED if idempotent else ToolIdempotency.UNSUPPORTED
            found = OperationJournalEntry.tool(
                operation_id,
                self.journal.cycle,
                digest,
                tool_call_id=call_id,
                tool_name=name,
                arguments=dict(arguments),
                idempotency_key=idem,
                idempotency_support=support,
            )
        elif found.request_digest != digest:
            raise _diverged(name)

        def invoke(entry: OperationJournalEntry, context: Mapping[str, str]) -> Any:
            return call(ToolCall(name, arguments, idem, entry.operation_id, entry.attempt, context))

        return await self._run(found, name, invoke, write_first=not idempotent)

    async def model(self, request: Mapping[str, Any], call: ModelFn, *, key: str | None) -> Any:
        key, operation_id = self._operation(OperationKind.MODEL, key)
        projection = model_request(request)
        digest = operation_request_digest(
            {"schema_version": OPERATION_REQUEST_SCHEMA, "kind": "model", "request": projection},
            kind=OperationKind.MODEL,
        )
        name = str(projection["model"])
        found = self.journal.find(OperationKind.MODEL, operation_id, self.step)
        if found is None:
            found = OperationJournalEntry.model(operation_id, self.journal.cycle, digest)
        elif found.request_digest != digest:
            raise _diverged(name)

        def invoke(entry: OperationJournalEntry, context: Mapping[str, str]) -> Any:
            return call(ModelCall(projection, entry.operation_id, entry.attempt, context))

        return await self._run(found, name, invoke, write_first=True)

    async def _run(
        self,
        entry: OperationJournalEntry,
        name: str,
        invoke: Callable[[OperationJournalEntry, Mapping[str, str]], Any],
        *,
        write_first: bool,
    ) -> Any:
        """Make the call ``entry`` journals, or replay it; ``write_first`` stores its
        ``started`` entry before it goes out (else it rides the outcome's write)."""
        journal, recorder = self.journal, telemetry.current()
        if entry.state in _SETTLED:  # answered from its receipt: operation_replayed
            journal.lease.emit(replayed(journal.lease.stored, entry))
            journal.note(self.step, entry, name, replayed=True)
            with recorder.call(journal.thread, self.step, entry, name) as span:
                recorder.call_outcome(span, "replayed")
        if entry.state is OperationState.SUCCEEDED:
            return entry.receipt
        if entry.state is OperationState.FAILED:
            error = entry.error
            assert error is not None
            raise CallFailed(error.code, error.message, retryable=error.retryable)
        if entry.state is not OperationState.PLANNED:  # recovery settles these first
            raise DurableError(
                "operation_transition_invalid",
                f"call {entry.operation_id} is {entry.state.value}; it cannot be made now",
            )
        started = entry.start()
        await journal.lease.ensure_live()  # a stalled holder starts nothing
        if write_first:
            await journal.write(started)
            await journal.lease.ensure_live()  # nor sends what it journaled before a stall
        moves: tuple[OperationJournalEntry, ...] = () if write_first else (started,)
        with recorder.call(journal.thread, self.step, started, name) as span:
            try:
                outcome = invoke(started, span.trace_context)
                if inspect.isawaitable(outcome):
                    outcome = await outcome
                settled = started.succeed(outcome)  # refuses a receipt that is not I-JSON
            except CallFailed as failed:
                error = OperationError(failed.failure, failed.message, failed.retryable)
                self._settle(moves, started.fail(error), name, span)
                raise
            except Exception as exc:
                definitive = definitive_failure(entry.kind, exc)
                if definitive is None:  # sent or not, nobody knows: never guessed
                    self._settle(moves, started.mark_ambiguous(), name, span)
                    raise CallAmbiguous(started.operation_id, name) from exc
                # the original's definitive failures (a context-length refusal, a tool's
                # typed error): nothing happened outside, so the call failed for certain
                self._settle(moves, started.fail(definitive), name, span)
                raise CallFailed(
                    definitive.code, definitive.message, retryable=definitive.retryable
                ) from exc
            self._settle(moves, settled, name, span)
        return outcome

    def _settle(
        self,
        moves: tuple[OperationJournalEntry, ...],
        settled: OperationJournalEntry,
        name: str,
        span: telemetry.CallSpan,
    ) -> None:
        """Note a call's outcome (after ``moves``) in the journal, in its step's calls
        and on its span."""
        self.journal.settle((*moves, settled))
        self.journal.note(self.step, settled, name, replayed=False)
        telemetry.current().call_outcome(span, settled.state.value)


def _diverged(name: str) -> DurableError:
    return DurableError(
        "checkpoint_journal_integrity_mismatch",
        f"call {name!r} was journaled with another request; a node re-run must make the "
        "same calls in the same order (or give each a key=)",
    )
