"""A store in one SQLite file: checkpoints, records and events, safe across tasks,
threads and processes.

Why it is shaped this way (the full story, with figures, is docs/sqlite.md):

* Every write goes through **one writer thread** owning one long-lived connection
  (:mod:`~agentflow.checkpoint.sqlite.workers`). It drains whatever writes are
  waiting, applies them in one ``BEGIN IMMEDIATE`` transaction (each guard or
  compare-and-set decided in order, a refusal failing only its own write) and
  commits once: **group commit**. Eight concurrent writers then cost about one
  fsync, not eight, and every write is still durable before it returns.
* Reads run on **their own thread and connection**, so a read never waits behind
  the writer's fsync (WAL lets readers proceed during a write).
* A thread's parts are rows of one file written by that one writer, so
  :meth:`~agentflow.checkpoint.store.Store.commit_step` (the step's checkpoint,
  its receipts and the record's progress) and ``delete_thread`` are each **one
  job in one transaction**: one commit, all or nothing.

The parts live in :mod:`.checkpoints`, :mod:`.runs` and :mod:`.events` (each
reaching the file through :mod:`.connection`), their statements in :mod:`.sql`,
the tables and their one schema version in :mod:`.schema`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from agentflow.checkpoint.backend import EncodedCheckpoint
from agentflow.checkpoint.base import Redactor
from agentflow.checkpoint.codec import CheckpointCodec
from agentflow.checkpoint.plans import Write
from agentflow.checkpoint.sqlite.checkpoints import SqliteCheckpoints, checked_size, put_rows
from agentflow.checkpoint.sqlite.events import SqliteEvents
from agentflow.checkpoint.sqlite.fleet import SqliteFleet
from agentflow.checkpoint.sqlite.outbox import deliver_in
from agentflow.checkpoint.sqlite.runs import apply_write, delete_run, refused
from agentflow.checkpoint.sqlite.sql import DELETE_EVENTS, DELETE_STEPS, DELETE_SUMMARY, REVISION
from agentflow.checkpoint.sqlite.workers import PairKey
from agentflow.checkpoint.store_base import StoreBase
from agentflow.durable.enums import ClaimMode
from agentflow.durable.errors import ClaimActive
from agentflow.durable.run.record import DurableCheckpoint
from agentflow.errors import InvalidArgument

if TYPE_CHECKING:
    from agentflow.checkpoint.sealing import KeyRing

__all__ = ["SYNCHRONOUS_MODES", "SqliteCheckpointer"]

#: Accepted values of ``synchronous``, weakest to strongest (SQLite's PRAGMA).
SYNCHRONOUS_MODES: Final = ("OFF", "NORMAL", "FULL", "EXTRA")


class SqliteCheckpointer(SqliteCheckpoints, SqliteFleet, SqliteEvents, StoreBase):
    """A :class:`~agentflow.checkpoint.store.Store` in one SQLite file in WAL mode.

    ``synchronous`` is SQLite's durability knob: ``"FULL"`` (default) syncs the
    log at every commit, so a write that returned survives power loss;
    ``"NORMAL"`` survives a crash of the process but may lose the last commits
    on power loss; ``"OFF"`` leaves flushing to the OS; ``"EXTRA"`` also syncs
    the directory. ``busy_timeout`` (seconds) is how long a write waits for
    another process holding the file's write lock before raising
    :class:`~agentflow.errors.StoreUnavailable`. With ``secure_permissions``
    (default) a new file is created owner-only (0600, and its WAL files with
    it) in directories created owner-only (0700). With ``create=False`` a
    file that does not exist or holds no agentflow tables raises
    :class:`~agentflow.errors.StoreNotFound` on the first call, and nothing is
    created (read-only callers). ``sealing`` (a
    :class:`~agentflow.checkpoint.sealing.KeyRing`) seals checkpoints, record
    bodies, journal entries and event payloads alike.

    The two worker threads and their connections start on first use, are
    shared by every store open on the same file in this process (tenants
    included, so they join one group commit), and stop when the last of them
    is closed (``close`` or ``async with``), after the queued writes.
    ``put`` encodes the checkpoint on the writer thread: do not mutate its
    state until ``put`` returns. Leases run on this machine's wall clock.
    """

    kind = "sqlite"
    delivers_in_step = True

    def __init__(
        self,
        path: str | os.PathLike[str] = ".runs/checkpoints.db",
        *,
        redact: Redactor | None = None,
        namespace: str | None = None,
        codec: CheckpointCodec | None = None,
        sealing: KeyRing | None = None,
        synchronous: str = "FULL",
        busy_timeout: float = 5.0,
        secure_permissions: bool = True,
        create: bool = True,
    ) -> None:
        super().__init__(namespace=namespace, redact=redact, codec=codec, sealing=sealing)
        if not isinstance(path, str | os.PathLike) or str(path) in {"", ":memory:"}:
            raise InvalidArgument(f"path must name a database file, got {path!r}")
        mode = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if mode not in SYNCHRONOUS_MODES:
            raise InvalidArgument(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {mode!r}")
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise InvalidArgument(f"busy_timeout must be seconds, got {busy_timeout!r}")
        if not 0 <= busy_timeout <= 86_400:
            raise InvalidArgument(f"busy_timeout must be 0 to 86400 seconds, not {busy_timeout}")
        self.path = Path(path)
        self.synchronous: str = mode
        private = bool(secure_permissions)
        absolute = os.path.abspath(self.path)
        self._key: PairKey = (absolute, mode, float(busy_timeout), private, bool(create))

    def __repr__(self) -> str:
        return f"SqliteCheckpointer({str(self.path)!r}, namespace={self.namespace!r})"

    @property
    def database(self) -> str:
        """``sqlite:///`` and the file's resolved path."""
        return f"sqlite:///{os.path.realpath(self._key[0])}"

    # -- what crosses the parts ------------------------------------------------------

    async def _commit_step(
        self, thread: str, step: int, encode: Callable[[], EncodedCheckpoint], write: Write
    ) -> tuple[int | None, DurableCheckpoint]:
        """One writer job, so one transaction and one commit: the step must be new,
        then the guarded record write, the put, and the events pending after the write
        appended and recorded delivered. A refusal of either is a result, so nothing
        of this step is written and its group commits the rest."""
        namespace = self._namespace
        delivery = await self._delivery("commit_step", write.record)

        def prepare() -> Callable[[sqlite3.Connection], tuple[Any, Any, Any, Any]]:
            encoded = checked_size(encode())

            def apply(conn: sqlite3.Connection) -> tuple[Any, Any, Any, Any]:
                existing = conn.execute(REVISION, (namespace, thread, step)).fetchall()
                if existing:
                    return existing[0][0], None, None, None
                lease, found = apply_write(conn, namespace, write)
                if found is not None:
                    return None, lease, found, None
                put_rows(conn, namespace, encoded)
                if delivery is None:
                    return None, lease, None, write.record
                return None, lease, None, deliver_in(conn, namespace, write.record, delivery)

            return apply

        existing, lease, found, record = await self._prepared("commit_step", prepare)
        if existing is not None:
            return int(existing), write.record
        if found is not None:
            raise refused(write, found)
        return None, replace(record, lease_expires_at_ms=lease)

    async def _start_run(
        self,
        thread: str,
        encode: Callable[[], EncodedCheckpoint],
        checkpoint: DurableCheckpoint,
        claim_token: str,
        lease_ms: int,
    ) -> tuple[int | None, DurableCheckpoint | None]:
        """One writer job, so one transaction and one commit: the step and the record
        must both be new, then the record's insert, its claim, the step's put and the
        record's pending events appended and recorded delivered."""
        namespace = self._namespace
        cycle = checkpoint.cycle_index + 1
        insert = self._inserted(checkpoint)
        claim = self._claiming(thread, cycle, claim_token, lease_ms, ClaimMode.CONTINUE)
        delivery = await self._delivery("start_run", checkpoint)

        def prepare() -> Callable[[sqlite3.Connection], tuple[Any, Any, Any]]:
            encoded = checked_size(encode())

            def apply(conn: sqlite3.Connection) -> tuple[Any, Any, Any]:
                existing = conn.execute(REVISION, (namespace, thread, 0)).fetchall()
                if existing:
                    return existing[0][0], None, None
                if not insert(conn):
                    return None, None, None
                outcome = claim(conn)  # a fresh record: this claim cannot be refused
                put_rows(conn, namespace, encoded)
                if delivery is None:
                    return None, outcome, None
                return None, outcome, deliver_in(conn, namespace, checkpoint, delivery)

            return apply

        existing, outcome, done = await self._prepared("start_run", prepare)
        if outcome is None:
            return (None if existing is None else int(existing)), None
        claimed = self._claimed(
            thread,
            outcome,
            cycle_index=cycle,
            claim_token=claim_token,
            lease_ms=lease_ms,
            mode=ClaimMode.CONTINUE,
        )
        if done is not None:  # the claim read the record before its events were delivered
            claimed = replace(
                claimed, event_outbox=done.event_outbox, event_cursor=done.event_cursor
            )
        return None, claimed

    async def _delete_thread(self, thread: str, force: bool) -> bool:
        """Record, journal, events, checkpoints and summary in one transaction, refused
        (deleting nothing) on a lease live on the clock read inside it."""
        run = {"namespace": self._namespace, "key": thread}
        key = (self._namespace, thread)

        def apply(conn: sqlite3.Connection) -> bool | None:
            found = delete_run(conn, run, force)
            if found is None:
                return None
            events: int = conn.execute(DELETE_EVENTS, run).rowcount
            steps: int = conn.execute(DELETE_STEPS, key).rowcount
            conn.execute(DELETE_SUMMARY, key)
            return found or events > 0 or steps > 0

        deleted: bool | None = await self._write("delete_thread", apply)
        if deleted is None:
            raise ClaimActive(f"thread {thread!r} is held by a live lease; delete it with force")
        return deleted
