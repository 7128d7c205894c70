"""Single commands on connections kept at hand, taken once from a client's pool.

Around every command redis-py takes a connection from its pool and gives it back (a lock, a
poll of the socket, metrics), wraps the call in its retry layer and waits for the socket to
drain under a timeout. On a one-job enqueue on loopback that is most of the client's own time
(docs/benchmarks.md has the figures, asyncio and sync).

A connection kept here is checked with one poll as it is taken (an end or bytes waiting: the
peer closed it, or a reply was never read) and connects again if it must; it is used as is.
One that fails, or whose call was cancelled with a reply unread, goes back to the pool
disconnected; an error reply
(`-ERR`, NOSCRIPT) leaves it fit. Each call takes a connection of its own, so concurrent
callers never share one (list pop and append are atomic).

Only a plain pool is held from: a Sentinel pool asks the sentinels for the master on checkouts,
which is how its clients notice a failover (engine/transport/failover.py), and a cluster client
routes each command by its keys. Those keep redis-py's own path (`held_runner`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from hiredis import pack_command
from redis.asyncio import Redis
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError

from .connection import TypedRedis
from .faults import typed


def packed(command: tuple[Any, ...]) -> bytes:
    """Pack a command as redis-py's hiredis packer does (a value of no Redis type: DataError)."""
    try:
        out: bytes = pack_command(command)
    except TypeError as exc:
        raise DataError(str(exc)) from exc
    return out


class HeldConnections:
    """Run single commands of a synchronous client on connections kept at hand (thread-safe).

    Errors are redis-py's own: the caller types them (SyncClient).
    """

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.pool = redis.connection_pool
        self._idle: list[Any] = []
        self._pid = os.getpid()

    def execute_command(self, *command: Any) -> Any:
        """Send one command and return its reply (a `-ERR` reply raises, as redis-py does)."""
        connection = self._take()
        try:
            connection.send_packed_command([packed(command)])
            reply = connection.read_response()
        except ResponseError:
            self._idle.append(connection)  # the whole reply was read
            raise
        except BaseException:
            connection.disconnect()
            self.pool.release(connection)
            raise
        self._idle.append(connection)
        return reply

    def execute_many(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Send `commands` in one write on one connection; return their replies in order, an
        error reply as its exception in its place (the connection stays fit)."""
        connection = self._take()
        replies: list[Any] = []
        try:
            connection.send_packed_command([b"".join(packed(c) for c in commands)])
            for _ in commands:
                try:
                    replies.append(connection.read_response())
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            connection.disconnect()
            self.pool.release(connection)
            raise
        self._idle.append(connection)
        return replies

    def _take(self) -> Any:
        """Return a connection kept at hand (checked with one poll) or a new one of the pool."""
        if os.getpid() != self._pid:  # forked: the parent's sockets are not ours to use
            self._idle, self._pid = [], os.getpid()
        try:
            connection = self._idle.pop()
        except IndexError:
            return self.pool.get_connection()
        try:
            stale = connection.can_read()
        except (RedisConnectionError, OSError):
            stale = True
        if stale:
            connection.disconnect()
        return connection

    def script_load(self, source: str) -> Any:
        """Load a script (after NOSCRIPT) through the client."""
        return self.redis.script_load(source)

    def clear(self) -> None:
        """Give every connection kept back to the pool."""
        idle, self._idle = self._idle, []
        for connection in idle:
            self.pool.release(connection)


class AsyncHeldConnections:
    """Run single commands of an asyncio client (TypedRedis) on connections kept at hand.

    Failures raise the engine's typed errors, as the client's own `execute_command` does. The
    client's `aclose` closes these connections too: the pool counts them as in use.
    """

    def __init__(self, redis: TypedRedis) -> None:
        self.pool = redis.connection_pool
        self.shown_url = redis.shown_url
        self._idle: list[Any] = []

    async def execute_command(self, *command: Any) -> Any:
        """Send one command and return its reply (no response callback: scripts need none)."""
        data = packed(command)
        try:
            connection = self._idle.pop()
        except IndexError:
            try:
                connection = await self.pool.get_connection()  # type: ignore[no-untyped-call]
            except Exception as exc:
                raise typed(exc, self.shown_url)  # noqa: B904 (typed() keeps the cause)
        try:
            await connection.send_now(data)
            reply = await connection.read_response()
        except ResponseError as exc:
            self._idle.append(connection)  # the whole reply was read
            raise typed(exc, self.shown_url)  # noqa: B904
        except BaseException as exc:
            await self._drop(connection, exc)
            raise
        self._idle.append(connection)
        return reply

    async def execute_many(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Send `commands` in one write on one connection; return their replies in order, an
        error reply as its typed exception in its place (the connection stays fit).

        One connection for all: a WAIT after a script call waits for that call's writes only
        when it follows them on the connection that made them (engine/transport/acks.py).
        """
        data = b"".join(packed(c) for c in commands)
        connection = await self._take()
        replies: list[Any] = []
        try:
            await connection.send_now(data)
            for _ in commands:
                try:
                    replies.append(await connection.read_response())
                except ResponseError as exc:
                    replies.append(typed(exc, self.shown_url))
        except BaseException as exc:
            await self._drop(connection, exc)
            raise
        self._idle.append(connection)
        return replies

    async def _take(self) -> Any:
        """Return a connection kept at hand, or a new one of the pool."""
        try:
            return self._idle.pop()
        except IndexError:
            try:
                return await self.pool.get_connection()  # type: ignore[no-untyped-call]
            except Exception as exc:
                raise typed(exc, self.shown_url)  # noqa: B904 (typed() keeps the cause)

    async def _drop(self, connection: Any, exc: BaseException) -> None:
        """Give back a connection a failure (or a cancellation) left unfit; raise the typed
        error of a failure (the caller re-raises a cancellation)."""
        await connection.disconnect(nowait=True)
        await self.pool.release(connection)
        if isinstance(exc, Exception):
            raise typed(exc, self.shown_url)  # typed() keeps the cause


def held_runner(redis: Redis) -> Redis | AsyncHeldConnections:
    """Return what runs a client's single commands: connections held from its plain pool, or
    the client itself (Sentinel, cluster, or a client not made by engine.transport.connection)."""
    pool = getattr(redis, "connection_pool", None)
    plain = pool is not None and not isinstance(pool, SentinelConnectionPool)
    if isinstance(redis, TypedRedis) and plain:
        return AsyncHeldConnections(redis)
    return redis
