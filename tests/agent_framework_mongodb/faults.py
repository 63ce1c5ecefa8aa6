"""A transparent proxy over a real AsyncCollection that records and intercepts calls.

MongoDB's behaviour is never faked: every call not intercepted goes to the
real server. A test intercepts one method to inject a driver failure, or to
hold the call open so that it can be cancelled mid-flight.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
