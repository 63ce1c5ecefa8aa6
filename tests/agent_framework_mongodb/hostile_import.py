"""Never imported by the suite: importing it runs ``__init_subclass__`` and ``__set_name__``.

The loader resolves names only in modules that are already imported, so a
stored checkpoint naming ``Child`` (even when it is listed) can never make
these class-creation hooks run.
"""

from __future__ import annotations

from typing import Any

from tests.agent_framework_mongodb.hostile_types import touch


class Base:
    def __init_subclass__(cls, **kwargs: Any) -> None:
        touch()
        super().__init_subclass__(**kwargs)


class Named:
    def __set_name__(self, owner: type, name: str) -> None:
        touch()


class Child(Base):
    field = Named()
