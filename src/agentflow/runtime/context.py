"""What a node sees besides the state: its place in the run, and how to suspend.

Suspending is an exception that unwinds the node, so a resumed run re-runs the
node from its first line; the answers given so far are replayed, in call
order, to its ``interrupt``/``wait`` calls. The signal derives from
``BaseException`` so that a node's ``except Exception`` cannot swallow it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentflow.errors import InvalidArgument

__all__ = ["NodeContext", "Suspend"]


class Suspend(BaseException):
    """Raised by :meth:`NodeContext.interrupt` and :meth:`NodeContext.wait`."""

    def __init__(self, payload: Any, wake_at: str | None) -> None:
        super().__init__(payload, wake_at)
        self.payload = payload
        self.wake_at = wake_at


class NodeContext:
    """Passed to every node call as ``ctx``."""

    __slots__ = ("_answers", "_clock", "_used", "node", "step", "thread")

    def __init__(
        self,
        thread: str,
        step: int,
        node: str,
        answers: list[Any],
        clock: Callable[[], datetime],
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
