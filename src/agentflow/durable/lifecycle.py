"""``async with`` for every durable store: leaving the block closes the store."""

from __future__ import annotations

import abc
from typing import Self

__all__ = ["ClosingStore"]


class ClosingStore(abc.ABC):
    """A store that is its own async context manager; a subclass says what closing releases."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release what the store holds; safe to call twice."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
