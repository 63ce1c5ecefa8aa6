"""A module that fails as it is imported (a ``--graph`` must not show a traceback)."""

from __future__ import annotations

raise ZeroDivisionError("module-level code failed")
