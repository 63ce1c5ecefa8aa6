"""The runtime's own section of ``Checkpoint.extra``.

Everything the runtime keeps in a checkpoint beyond the model's fields lives
under ``extra["runtime"]``:

- ``graph``: the graph's name, so a worker or the CLI knows what to run;
- ``writes``: on a suspend, the updates of the step's nodes that finished, so
  they are not run again on resume;
- ``answers``: on a suspend, the answers each unfinished node has already had;
- ``by``: on the step that answers a suspend, who answered it (``host:pid:token``);
- ``operations``: the journaled external calls the step made (id, kind, name,
  state, attempt), the per-step history ``agentflow journal`` shows.

Extension state (see :class:`~agentflow.runtime.Durability`) is kept beside it
under ``extra["extensions"]``, where a redactor treats it as user data.
Who holds a run (its lease) is not in the checkpoint: it is the durable
record's claim (:mod:`agentflow.runtime.leases`).
"""

from __future__ import annotations

from typing import Any

from agentflow.checkpoint.base import Checkpoint

__all__ = ["EXTENSIONS_KEY", "RUNTIME_KEY", "runtime_of"]

RUNTIME_KEY = "runtime"
EXTENSIONS_KEY = "extensions"


def runtime_of(cp: Checkpoint) -> dict[str, Any]:
    """The runtime's section of ``cp.extra`` (empty for foreign checkpoints)."""
    section = cp.extra.get(RUNTIME_KEY)
    return section if isinstance(section, dict) else {}
