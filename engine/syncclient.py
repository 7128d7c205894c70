"""Enqueue from synchronous code on the caller's own thread: no event loop, no thread hop."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from hiredis import pack_command
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError

from .cluster import cluster_typed, is_cluster
from .connection import connect_sync
from .enqueueing import Call, Enqueuer, Eval, Step, run_steps
from .faults import typed
from .job import Job
from .luasrc import run_sync
from .settings import EngineSettings
from .task import Task


class SyncClient:
    """Submit jobs from sync code (a view, a management command) on redis-py's blocking pool.

    The very steps of `Client.enqueue_many` (engine/enqueueing.py: validation, chosen-id
    reservation, tracing, deduplication, queue registration, submit-13.lua), run here on the
    caller's thread. One client serves every thread of a process (the pool is thread-safe);
    Redis failures raise the engine's typed errors (RedisUnavailable, RedisRefused).
    """

    def __init__(self, settings: EngineSettings, redis: Any = None) -> None:
        self.settings = settings
        self.redis: Any = (
            redis
            if redis is not None
            else connect_sync(settings, timeout_s=settings.client_timeout_s)
        )
        self._typed = cluster_typed if is_cluster(self.redis) else typed
        self._enqueuer = Enqueuer(settings)
        # A cluster routes each command by its keys: it keeps redis-py's own path.
        self._held = None if is_cluster(self.redis) else HeldConnections(self.redis)

    def close(self) -> None:
        """Close the connection pool."""
        if self._held is not None:
            self._held.clear()
        self.redis.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def enqueue(self, task: Task, *args: Any, **kwargs: Any) -> Job:
        """Submit one call of `task`; use `task.using(...)` for per-call options."""
        return self.enqueue_many([task.call(*args, **kwargs)])[0]

    def enqueue_many(self, jobs: Iterable[Job]) -> list[Job]:
        """Submit jobs as `Client.enqueue_many` does."""
        done: list[Job] = run_steps(self._enqueuer.enqueue(list(jobs), atomic=False), self._run)
        return done

    def enqueue_flow(self, jobs: Iterable[Job]) -> list[Job]:
        """Submit a graph of jobs all or nothing, as `Client.enqueue_flow` does."""
        done: list[Job] = run_steps(self._enqueuer.enqueue(list(jobs), atomic=True), self._run)
        return done

    def _run(self, step: Step) -> Any:
        """Send one step to Redis; a failure raises the engine's typed error."""
        try:
            if isinstance(step, Eval):
                return run_sync(self._held or self.redis, step.verb, step.keys, step.argv)
            if isinstance(step, Call):
                return getattr(self.redis, step.method)(*step.args)
            if not step.commands:
                return []
            with self.redis.pipeline(transaction=False) as pipe:
                for method, args, options in step.commands:
                    getattr(pipe, method)(*args, **options)
                return pipe.execute()
        except Exception as exc:
            raise self._typed(exc, self.settings.redacted_url)  # noqa: B904 (keeps the cause)


def _packed(command: tuple[Any, ...]) -> bytes:
    """Pack a command as redis-py's hiredis packer does (a value of no Redis type: DataError)."""
    try:
        packed: bytes = pack_command(command)
    except TypeError as exc:
        raise DataError(str(exc)) from exc
    return packed


class HeldConnections:
    """Run single commands on connections kept at hand, taken once from a client's pool.

    redis-py's pool records metrics and polls the socket each time a connection is taken and
    given back: about 14 us of a one-job enqueue of about 100 us on loopback. A connection kept
    here is polled once as it is taken (closed by the server, or holding an unread reply: it
    connects again) and is used as is; one that fails goes back to the pool disconnected.
    Thread-safe: each call takes a connection of its own (list pop and append are atomic).
    """

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.pool = redis.connection_pool
        self._idle: list[Any] = []
        self._pid = os.getpid()

    def execute_command(self, *command: Any) -> Any:
        """Send one command and return its reply (a `-ERR` reply raises, as redis-py does)."""
        if os.getpid() != self._pid:  # forked: the parent's sockets are not ours to use
            self._idle, self._pid = [], os.getpid()
        try:
            connection = self._idle.pop()
        except IndexError:
            connection = self.pool.get_connection()
        else:
            try:
                stale = connection.can_read()
            except (RedisConnectionError, OSError):
                stale = True
            if stale:
                connection.disconnect()
        try:
            # hiredis packs the command in one call (redis-py's packer first walks every
            # argument in Python: ~3 us of a one-job enqueue's 24 arguments).
            connection.send_packed_command([_packed(command)])
            reply = connection.read_response()
        except BaseException:
            connection.disconnect()
            self.pool.release(connection)
            raise
        self._idle.append(connection)
        return reply

    def script_load(self, source: str) -> Any:
        """Load a script (after NOSCRIPT) through the client."""
        return self.redis.script_load(source)

    def clear(self) -> None:
        """Give every connection kept back to the pool."""
        idle, self._idle = self._idle, []
        for connection in idle:
            self.pool.release(connection)
