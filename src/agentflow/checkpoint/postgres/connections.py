"""The connections of one PostgreSQL checkpointer: its pool, kept connections, setup once.

A connection of our own pool is kept between calls: asyncpg's release spawns
a shielded task and costs a quarter of a put's client CPU. It goes back when a
task waits for one, when the call failed or was cancelled (asyncpg then cleans
it up), and on close. An injected pool gets every connection back at once and
stays the caller's. Driver errors pass through unchanged: the checkpointer
maps them for the public call they interrupted.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from agentflow.checkpoint.postgres.driver_errors import DRIVER_ERRORS
from agentflow.errors import InvalidStoreUrl

__all__ = ["KeptConnections", "split_connect_timeout"]

#: libpq's name for the seconds a connection may take to be made.
CONNECT_TIMEOUT: Final = "connect_timeout"
#: asyncpg's own connect timeout, used when the DSN sets none.
_ASYNCPG_CONNECT_TIMEOUT: Final = 60.0

_POOL_MAX_SIZE: Final = 10
#: A kept connection idle longer than this is closed rather than reused, as
#: asyncpg's pool does (same default), so that a firewall or load balancer that
#: silently drops idle TCP connections costs a reconnect, not a failed call.
_KEEP_IDLE_SECONDS = 300.0


async def _keep_session(conn: Any) -> None:
    """Skip asyncpg's reset query, a round trip per release: we leave no session
    state (SET, LISTEN, cursors, session locks). Transactions still roll back."""


def split_connect_timeout(dsn: str) -> tuple[str, float | None]:
    """``dsn`` without libpq's ``connect_timeout`` option, and its seconds (None: absent).

    asyncpg reads no timeout from a DSN: it would send the option to the server
    as a setting, which the server refuses, and wait its own 60 s for a host
    that never answers. So the option is taken out here and given to asyncpg.
    """
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = [value for key, value in query if key == CONNECT_TIMEOUT]
    if not given:
        return dsn, None
    try:
        seconds = float(given[-1])
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise InvalidStoreUrl(
            f"{CONNECT_TIMEOUT} must be a positive number of seconds, got {given[-1]!r:.40}"
        )
    rest = urlencode([(key, value) for key, value in query if key != CONNECT_TIMEOUT])
    return urlunsplit(parts._replace(query=rest)), seconds


class KeptConnections:
    """Hands out connections, creating the pool lazily and running ``prepare``
    (the schema setup) once before the first call gets one. A ``dsn`` may set
    ``connect_timeout`` (seconds), as libpq's do."""

    def __init__(self, dsn: str, pool: Any, prepare: Callable[[Any], Awaitable[None]]) -> None:
        self._dsn, self._connect_timeout = split_connect_timeout(dsn)
        self._pool: Any = pool
        self._owns_pool = pool is None
        self._prepare = prepare
        #: Connections of our own pool kept between calls, with when they were kept.
        self._idle: list[tuple[Any, float]] = []
        self._waiting = 0
        self._ready = False
        self._lock = asyncio.Lock()

    def lease(self) -> _Lease:
        """One call's connection, as ``async with``."""
        return _Lease(self)

    async def setup(self) -> None:
        """Run ``prepare`` now (again), opening the pool if needed."""
        async with self._lock:
            await self._run_prepare(await self._open_pool())

    async def close(self) -> None:
        """Close the pool if this object created it."""
        pool, idle = self._pool, self._idle
        if self._owns_pool and pool is not None:
            self._pool, self._idle = None, []
            try:
                for conn, _ in idle:
                    await pool.release(conn)
            finally:
                await pool.close()

    async def _open_pool(self) -> Any:
        """Call with ``self._lock`` held: creating the pool twice would leak one."""
        if self._pool is None:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=1,
                max_size=_POOL_MAX_SIZE,
                reset=_keep_session,
                timeout=self._connect_timeout or _ASYNCPG_CONNECT_TIMEOUT,
            )
        return self._pool

    async def _run_prepare(self, pool: Any) -> None:
        conn = await self._acquire(pool)
        try:
            await self._prepare(conn)
        finally:
            await pool.release(conn)
        self._ready = True

    async def _pool_ready(self) -> Any:
        """The pool, with the schema checked once, not per call."""
        pool = self._pool
        if pool is not None and self._ready:
            return pool
        async with self._lock:
            pool = await self._open_pool()
            if not self._ready:
                await self._run_prepare(pool)
        return pool

    async def _acquire(self, pool: Any) -> Any:
        """A kept connection, else one from the pool (every caller must use this:
        once all our connections are kept, ``pool.acquire()`` alone would wait forever)."""
        while self._idle:
            conn, since = self._idle.pop()
            if time.monotonic() - since < _KEEP_IDLE_SECONDS:
                return conn
            conn.terminate()
            await pool.release(conn)
        self._waiting += 1
        try:
            return await pool.acquire()
        finally:
            self._waiting -= 1


class _Lease:
    """A class, because a generator-based context manager alone cost 26 µs a call."""

    __slots__ = ("_conn", "_owner", "_pool")

    def __init__(self, owner: KeptConnections) -> None:
        self._owner = owner

    async def __aenter__(self) -> Any:
        owner = self._owner
        pool = self._pool = await owner._pool_ready()
        self._conn = await owner._acquire(pool)
        return self._conn

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        owner, pool = self._owner, self._pool
        if exc is None and owner._owns_pool and not owner._waiting and owner._pool is pool:
            owner._idle.append((self._conn, time.monotonic()))
            return
        try:
            await pool.release(self._conn)
        except DRIVER_ERRORS:
            if exc is None:
                raise
            # Otherwise the call's own failure is the one worth raising.
