"""Producer stability: what a durable run must pin before it starts.

A resumed run is only the same run if everything that steers it is pinned by
its run definition. The original therefore refuses, before it creates a
record or makes any call:

* a run with **handoffs** (``checkpoint_handoff_unsupported``): the handoff
  graph and the active agent are not part of the v2 wire, and resuming under
  the wrong agent is worse than refusing;
* a configured **process-local capability** that can change behaviour (a
  reconciliation provider, hooks, guardrails, a tool predicate, non-empty
  behaviour-affecting run metadata, ...) without a stable ``{id, version}``
  reference under its slot in ``capability_refs``
  (``checkpoint_definition_unstable``). The reference is declared by the
  host, never inferred from an object id, a type name or a callable name:
  those change between processes, or stay the same while the code changes.

Python adds one case the original's types rule out: a callable inside JSON
the definition records (run metadata) is process-local as well, and is
refused with the same code and the member's JSON pointer, instead of a
canonicalization error that does not say why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentflow.durable.errors import DurableError

__all__ = [
    "BEHAVIOR_METADATA_SLOT",
    "RECONCILIATION_PROVIDER_SLOT",
    "require_stable_producer",
]

#: The slot whose reference pins the code that interprets non-empty run metadata.
BEHAVIOR_METADATA_SLOT = "behavior_affecting_run_metadata"
#: The slot of a configured :class:`~agentflow.durable.ReconciliationProvider`.
RECONCILIATION_PROVIDER_SLOT = "reconciliation_provider"
_UNSTABLE = "checkpoint_definition_unstable"


def _callables(value: Any, pointer: str) -> Iterable[str]:
    if callable(value):
        yield pointer or "/"
    elif isinstance(value, Mapping):
        for name, item in value.items():
            token = str(name).replace("~", "~0").replace("/", "~1")
            yield from _callables(item, f"{pointer}/{token}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _callables(item, f"{pointer}/{index}")


def require_stable_producer(
    configured: Iterable[str],
    capability_refs: Mapping[str, object],
    *,
    recorded: Mapping[str, Any] | None = None,
    handoffs: int = 0,
) -> None:
    """Refuse a producer whose run the definition cannot pin, in the original's order.

    ``configured`` names the slots of the behaviour-affecting capabilities the
    run is configured with (``reconciliation_provider``, ``runtime_hook:0``,
    ...); each needs an entry in ``capability_refs``. ``recorded`` is JSON
    the definition records verbatim (its members by top-level name); a
    callable anywhere inside it is unstable. ``handoffs`` counts the run's
    handoffs (agentflow graphs have none; a host that adds them passes the
    count).
    """
    if handoffs:
        raise DurableError(
            "checkpoint_handoff_unsupported", "checkpoint v2 does not yet support handoff state"
        )
    found = sorted(_callables(recorded or {}, ""))
    if found:
        raise DurableError(
            _UNSTABLE,
            f"a process-local callable cannot be pinned by the run definition: {', '.join(found)}",
        )
    missing = [slot for slot in configured if slot not in capability_refs]
    if missing:
        raise DurableError(
            _UNSTABLE,
            f"checkpoint v2 requires stable capability refs for: {', '.join(missing)}",
        )
