"""What a node sees besides the state: its place in the run, how to suspend,
and how to make external calls that never run twice by accident.

Suspending is an exception that unwinds the node, so a resumed run re-runs the
node from its first line; the answers given so far are replayed, in call
order, to its ``interrupt``/``wait`` calls, and the calls it made through
``tool``/``model`` are replayed from the journal. The signal derives from
``BaseException`` so that a node's ``except Exception`` cannot swallow it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentflow.errors import InvalidArgument

if TYPE_CHECKING:
    from agentflow.durable import CheckpointExtension
    from agentflow.runtime.calls import ModelFn, NodeCalls, ToolFn

__all__ = ["NodeContext", "Suspend"]


class Suspend(BaseException):
    """Raised by :meth:`NodeContext.interrupt` and :meth:`NodeContext.wait`."""

    def __init__(self, payload: Any, wake_at: str | None) -> None:
        super().__init__(payload, wake_at)
        self.payload = payload
        self.wake_at = wake_at


class NodeContext:
    """Passed to every node call as ``ctx``."""

    __slots__ = (
        "_answers",
        "_calls",
        "_clock",
        "_credentials",
        "_extensions",
        "_used",
        "node",
        "step",
        "thread",
    )

    def __init__(
        self,
        thread: str,
        step: int,
        node: str,
        answers: list[Any],
        clock: Callable[[], datetime],
        *,
        calls: NodeCalls | None = None,
        extensions: Mapping[str, CheckpointExtension] | None = None,
        credentials: Mapping[str, Any] | None = None,
    ) -> None:
        #: The thread being run.
        self.thread = thread
        #: The step this node's update will be stored at.
        self.step = step
        #: This node's name.
        self.node = node
        self._answers = answers
        self._clock = clock
        self._used = 0
        self._calls = calls
        self._extensions = extensions or {}
        self._credentials = credentials or {}

    def _journal(self) -> NodeCalls:
        if self._calls is None:
            raise InvalidArgument("journaled calls are made by nodes of a running graph")
        return self._calls

    async def tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        call: ToolFn,
        *,
        idempotent: bool = False,
        key: str | None = None,
    ) -> Any:
        """Call a tool once: journaled before it goes out, replayed if it already ran.

        ``call(ToolCall)`` makes the real call (sync or async) and returns its
        result (JSON). ``ToolCall.idempotency_key`` is the ``idem_`` key of
        this call, the same on every retry: pass it on, so the tool can drop a
        repeat. Declare ``idempotent=True`` only for a tool that does; then
        the ``retry_idempotent_only`` policy may retry it after a crash.

        The call is journaled ``started`` before ``call`` runs, then
        ``succeeded`` with the result, which this returns. If ``call`` raises
        :class:`~agentflow.runtime.CallFailed` the call failed for certain: it
        is journaled ``failed`` and the error re-raised (now and on replay).
        Any other exception means it may have acted: it is journaled
        ``ambiguous``, :class:`~agentflow.runtime.CallAmbiguous` is raised,
        and the run suspends as ``reconciliation_required``. If the run is
        resumed after a crash, or after this node suspended, a call already
        settled returns its recorded result without calling again.

        ``key`` names the call within this node (default: ``tool-1``,
        ``tool-2``... in call order): give one when the order of calls may vary.
        """
        return await self._journal().tool(name, arguments, call, idempotent=idempotent, key=key)

    async def model(
        self, request: Mapping[str, Any], call: ModelFn, *, key: str | None = None
    ) -> Any:
        """Call a model once, journaled like :meth:`tool`; returns its response (JSON).

        ``request`` is the call's closed projection: ``model`` and any of
        ``messages``, ``settings``, ``tools``, ``output_schema`` and
        ``idempotency_key``; its digest identifies the call, so keep secrets
        out of it (read them with :meth:`credential`). ``call(ModelCall)``
        makes the call. A model call left ambiguous by a crash is retried only
        under the ``retry_with_duplicate_risk`` policy.
        """
        return await self._journal().model(request, call, key=key)

    def credential(self, slot: str) -> Any:
        """The live secret at a declared credential slot of the graph's ``Durability``."""
        try:
            return self._credentials[slot]
        except KeyError:
            raise InvalidArgument(
                f"{slot!r} is not a credential slot of this graph's durability"
            ) from None

    def extension(self, namespace: str) -> CheckpointExtension:
        """This run's instance of the extension ``namespace`` (its state restored)."""
        try:
            return self._extensions[namespace]
        except KeyError:
            raise InvalidArgument(f"this graph has no extension {namespace!r}") from None

    def _answer(self) -> tuple[bool, Any]:
        if self._used < len(self._answers):
            self._used += 1
            return True, self._answers[self._used - 1]
        return False, None

    def interrupt(self, payload: Any = None) -> Any:
        """Suspend the run until a human answers; return the answer on resume.

        The first call suspends: nothing this node did is stored, and the
        checkpoint carries ``payload`` (JSON) for whoever must decide. After
        ``resume(thread, value)`` the node runs again from its first line,
        and this same call returns ``value``. Code before the call therefore
        runs twice: keep it free of side effects, or make them idempotent.
        """
        answered, value = self._answer()
        if answered:
            return value
        raise Suspend(payload, None)

    def wait(self, until: datetime | timedelta, payload: Any = None) -> None:
        """Suspend the run until ``until`` (an instant, or a delay from now).

        Always suspends, even for an instant already past, so the wait is a
        durable point a worker picks up. When the run is resumed at or after
        the wake time the node runs again and this call returns None. A naive
        datetime is taken as UTC.
        """
        answered, _ = self._answer()
        if answered:
            return
        if isinstance(until, timedelta):
            wake = self._clock() + until
        elif isinstance(until, datetime):
            wake = until if until.tzinfo is not None else until.replace(tzinfo=UTC)
        else:
            raise InvalidArgument(
                f"wait() takes a datetime or timedelta, got {type(until).__name__}"
            )
        raise Suspend(payload, wake.astimezone(UTC).isoformat())
