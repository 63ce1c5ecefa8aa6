"""Who holds a run: a stable worker identity, or a name made up for one process.

A claim token is ``OWNER#RANDOM`` (:mod:`agentflow.runtime.leases`). Without
an identity the owner is ``host:pid:random``, new in every process, so the
runs a crashed process held are free again only once their leases lapse.
A *worker identity* (``compile(..., worker_id=)``, ``Worker(worker_id=)``,
``agentflow worker --worker-id``, ``$AGENTFLOW_WORKER_ID``) is the owner
itself, kept across restarts: a process started under it finds the runs its
previous incarnation held (:meth:`~agentflow.checkpoint.store.Store.list_held`)
and takes them back at once. So one identity must be one live process at a
time: a second live process under it would take the first one's runs.
"""

from __future__ import annotations

import os
import secrets
import socket
from typing import Final

from agentflow.checkpoint.fleet import check_holder
from agentflow.durable.errors import DurableError
from agentflow.errors import InvalidArgument

__all__ = ["WORKER_ID_ENV", "check_worker_id", "owner_of", "worker_identity"]

#: The environment variable a :class:`~agentflow.runtime.Worker` takes its identity from.
WORKER_ID_ENV: Final = "AGENTFLOW_WORKER_ID"


def check_worker_id(worker_id: object) -> str:
    """``worker_id`` if it can name a holder (non-blank, no ``#``), else InvalidArgument."""
    try:
        return check_holder(worker_id)
    except DurableError as exc:
        raise InvalidArgument(f"worker_id {worker_id!r}: {exc.message}") from exc


def owner_of(worker_id: str | None) -> str:
    """The owner named in this process's claim tokens: the identity, or a name made
    up for this process (``host:pid:random``)."""
    if worker_id is not None:
        return check_worker_id(worker_id)
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def worker_identity(worker_id: str | None) -> str | None:
    """A worker's identity: ``worker_id``, else ``$AGENTFLOW_WORKER_ID`` (unset or
    empty: none). Only workers read the variable: a process that also serves
    direct calls gives its graphs an identity with ``compile(worker_id=)``."""
    chosen = worker_id if worker_id is not None else os.environ.get(WORKER_ID_ENV) or None
    return None if chosen is None else check_worker_id(chosen)
