"""A transparent proxy over a real AsyncCollection that records and intercepts calls.

MongoDB's behaviour is never faked: every call not intercepted goes to the
real server. A test intercepts one method to inject a driver failure, or to
hold the call open so that it can be cancelled mid-flight.
:func:`io_besides_the_refusal` tells a refused save's own record of the
refusal apart from everything else it might have sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_framework_mongodb.refusals import REFUSAL_KIND

Interceptor = Callable[..., Any]


class CollectionProxy:
    """Forwards to ``target``; ``calls`` lists (method, args, kwargs) in order."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self._interceptors: dict[str, Interceptor] = {}
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def intercept(self, method: str, interceptor: Interceptor) -> None:
        """Route ``method`` to ``interceptor(real_method, *args, **kwargs)``."""
        self._interceptors[method] = interceptor

    @property
    def name(self) -> str:
        return str(self._target.name)

    def __getattr__(self, method: str) -> Any:
        real = getattr(self._target, method)
        interceptor = self._interceptors.get(method)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((method, args, kwargs))
            if interceptor is not None:
                return interceptor(real, *args, **kwargs)
            return real(*args, **kwargs)

        return call

    def methods(self) -> list[str]:
        return [name for name, _, _ in self.calls]


def io_besides_the_refusal(recording: CollectionProxy) -> list[str]:
    """The methods called, less the two a refused save records itself with.

    A refused save sends nothing before its refusal; afterwards it reads the
    run's top sequence (``find_one``) and writes the run's refusal document
    (``replace_one``), and nothing else: no counter, no checkpoint.
    """
    calls = recording.calls
    kept = []
    for i, (method, args, _) in enumerate(calls):
        following = calls[i + 1] if i + 1 < len(calls) else None
        if _is_refusal_write(method, args):
            continue
        if method == "find_one" and following and _is_refusal_write(following[0], following[1]):
            continue
        kept.append(method)
    return kept


def refusal_recorded(recording: CollectionProxy) -> bool:
    return any(_is_refusal_write(method, args) for method, args, _ in recording.calls)


def _is_refusal_write(method: str, args: tuple[Any, ...]) -> bool:
    return (
        method == "replace_one"
        and bool(args)
        and isinstance(args[0], dict)
        and args[0].get("_kind") == REFUSAL_KIND
    )
