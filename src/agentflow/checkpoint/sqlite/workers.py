"""The writer and reader threads behind the SQLite checkpointer.

Each file has one writer and one reader thread per process, each owning one
connection and fed through a queue; every checkpointer open on that file
shares them (reference-counted in a per-process registry that a forked child
forgets). Results go back to the callers' event loops in one hand-off per loop,
driver errors untranslated (the checkpointer maps them, naming its operation).

A thread that others share must outlive anything a job does: whatever a job
raises, even a ``BaseException`` from a user's redactor, is delivered to that
job's caller and the thread goes on serving the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from agentflow.checkpoint.sqlite.schema import open_connection, transaction
from agentflow.errors import StoreClosed

__all__ = ["Pair", "PairKey", "acquire_pair", "release_pair"]

#: Most jobs one transaction takes, so one commit never holds the lock for long.
_MAX_GROUP: Final = 128

#: A queued job: the caller's loop, its future, and the work (None asks the thread to stop).
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any] | None]
_Outcome = tuple["asyncio.Future[Any]", Any]
#: What a pair is shared by: (absolute path, synchronous, busy_timeout, owner-only
#: files, may create the store).
PairKey = tuple[str, str, float, bool, bool]


def _shared(exc: BaseException) -> BaseException:
    """A copy of an error reported to every caller of a failed group or open, so
    the tracebacks of callers that failed together do not pile onto one object."""
    error = copy.copy(exc)
    error.__cause__ = exc.__cause__
    return error


def _settle(outcomes: list[_Outcome]) -> None:
    for future, outcome in outcomes:
        if future.done():  # the caller was cancelled; nobody is waiting
            continue
        if isinstance(outcome, BaseException):
            try:
                future.set_exception(outcome)
            except TypeError:  # StopIteration cannot travel through a future
                error = RuntimeError(f"{type(outcome).__name__} raised in the sqlite worker")
                error.__cause__ = outcome
                future.set_exception(error)
        else:
            future.set_result(outcome)


def _deliver(jobs: list[_Job], outcomes: list[Any]) -> None:
    """Hand results back with one ``call_soon_threadsafe`` per loop, not one per job."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for (loop, future, _), outcome in zip(jobs, outcomes, strict=True):
        by_loop.setdefault(loop, []).append((future, outcome))
    for loop, settled in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits
            loop.call_soon_threadsafe(_settle, settled)


class _Worker:
    """One daemon thread owning one connection, fed through a queue.

    The thread drains every job waiting and passes them to ``run`` at once
    (the writer makes one transaction of them). The connection is opened on
    the first group and again after a failed open, so a transient error (a
    lock held at start-up) is not sticky. A job queued after the thread
    stopped is failed, never left hanging.
    """

    def __init__(
        self,
        name: str,
        connect: Callable[[], sqlite3.Connection],
        run: Callable[[sqlite3.Connection, list[Callable[..., Any]]], list[Any]],
    ) -> None:
        self._connect = connect
        self._run_group = run
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def submit(self, work: Callable[..., Any] | None) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((loop, future, work))
        return future

    def _drain(self) -> list[_Job]:
        jobs = [self._queue.get()]
        with contextlib.suppress(queue.Empty):
            while len(jobs) < _MAX_GROUP:
                jobs.append(self._queue.get_nowait())
        return jobs

    def _loop(self) -> None:
        conn: sqlite3.Connection | None = None
        stop: list[_Job] = []
        while not stop:
            jobs = self._drain()
            stop = [job for job in jobs if job[2] is None]
            work = [job for job in jobs if job[2] is not None]
            if not work:
                continue
            try:
                conn = conn or self._connect()
                outcomes = self._run_group(conn, [job[2] for job in work])  # type: ignore[misc]
            except BaseException as exc:  # the thread serves others: it must not die
                outcomes = [_shared(exc) for _ in work]
            _deliver(work, outcomes)
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        late: list[_Job] = []
        with contextlib.suppress(queue.Empty):
            while True:
                late.append(self._queue.get_nowait())
        _deliver(late, [StoreClosed("the SqliteCheckpointer is closed") for _ in late])
        _deliver(stop, [None] * len(stop))


class Pair:
    """The writer and reader of one file, shared by every checkpointer on it here.

    Checkpointers of several tenants on one file then join one group commit
    instead of contending for SQLite's write lock, whose busy handler backs
    off by sleeping whole milliseconds.
    """

    def __init__(self, key: PairKey) -> None:
        path, synchronous, busy_timeout, private, create = Path(key[0]), *key[1:]

        def connect(read_only: bool) -> sqlite3.Connection:
            return open_connection(
                path, synchronous, busy_timeout, read_only=read_only, private=private, create=create
            )

        self.writer = _Worker("agentflow-sqlite-writer", lambda: connect(False), _write_group)
        self.reader = _Worker("agentflow-sqlite-reader", lambda: connect(True), _read_each)
        self.users = 0


#: Open pairs by (absolute path, synchronous, busy_timeout), for this process only.
_PAIRS: dict[PairKey, Pair] = {}
_PAIRS_LOCK = threading.Lock()


def _forget_pairs_after_fork() -> None:
    """A forked child has none of the parent's threads, and maybe a held lock."""
    global _PAIRS_LOCK  # noqa: PLW0603
    _PAIRS_LOCK = threading.Lock()
    _PAIRS.clear()


os.register_at_fork(after_in_child=_forget_pairs_after_fork)


def acquire_pair(key: PairKey) -> Pair:
    """The pair for ``key``, started if none is open; one :func:`release_pair` must follow."""
    with _PAIRS_LOCK:
        pair = _PAIRS.get(key)
        if pair is None:
            pair = _PAIRS[key] = Pair(key)
        pair.users += 1
    return pair


async def release_pair(key: PairKey, pair: Pair) -> None:
    """Drop one user of ``pair``; the last one stops both threads after their queued jobs."""
    with _PAIRS_LOCK:
        pair.users -= 1
        if pair.users:
            return
        del _PAIRS[key]
    workers = (pair.writer, pair.reader)
    for stopped in [worker.submit(None) for worker in workers]:
        await stopped
    for worker in workers:
        worker.thread.join()


def _read_each(conn: sqlite3.Connection, reads: list[Callable[..., Any]]) -> list[Any]:
    outcomes: list[Any] = []
    for read in reads:
        try:
            outcomes.append(read(conn))
        except BaseException as exc:
            outcomes.append(exc)
    return outcomes


def _write_group(conn: sqlite3.Connection, writes: list[Callable[..., Any]]) -> list[Any]:
    """Apply a group of writes in one transaction and commit once.

    Each write is a *prepare* callable, run before the lock is taken (encoding,
    redaction: bad input fails only its own write), returning the callable to
    run inside the transaction. A lost compare-and-set is a result, not an
    error, and changes nothing; any error inside the transaction rolls the
    whole group back, so every write in it fails and none of it persisted.
    """
    outcomes: list[Any] = [None] * len(writes)
    ready: list[tuple[int, Callable[[sqlite3.Connection], Any]]] = []
    for index, prepare in enumerate(writes):
        try:
            ready.append((index, prepare()))
        except BaseException as exc:
            outcomes[index] = exc
    if not ready:
        return outcomes
    try:
        with transaction(conn):
            for index, apply in ready:
                outcomes[index] = apply(conn)
    except BaseException as exc:
        for index, _ in ready:
            outcomes[index] = _shared(exc)
    return outcomes
