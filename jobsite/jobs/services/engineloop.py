"""How a service call reaches the engine: `twins()` makes the sync and async forms of an
operation; both run on the process's engine loop (one daemon thread running an event loop, and
the engine clients it keeps open), except inside a `session()`. An enqueue from sync code does
not hop: it runs on the caller's thread on the process's `sync_client` (engine.SyncClient, a
blocking connection pool beside the loop), the hot path of a view; one from async code runs on
the caller's own loop (`loop_client`).

`async_to_sync` makes a new event loop for each call, and an engine client belongs to one
loop, so each sync call used to open a connection, name it, register its queue and close it
again, many times the cost of the enqueue itself. Here a call is one hop to this thread and back,
on pooled connections. The hop carries the caller's context variables (trace context).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import Future
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Concatenate

from engine import Client, EngineSettings, RedisUnavailable, SyncClient
from jobsite.jobs.conf import engine_settings
from jobsite.jobs.services import reach

log = logging.getLogger("jobsite.engineloop")

# Clients kept open, one per EngineSettings (tests and `ping` use several): the least recently
# used beyond this many is closed.
MOST_CLIENTS = 4
# How long the process's exit waits for the clients' connections to close.
CLOSE_WAIT_S = 1.0


def _new_loop() -> asyncio.AbstractEventLoop:
    """Return a uvloop loop where uvloop is installed (a hop costs about half), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class EngineLoop:
    """An event loop in a daemon thread with one long-lived engine client per settings."""

    def __init__(self) -> None:
        self.loop = _new_loop()
        self._clients: OrderedDict[EngineSettings, Client] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()  # evicted clients closing (kept alive)
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="jobsite-engine-loop", daemon=True
        )
        self._thread.start()

    def submit[T](
        self, settings: EngineSettings, fn: Callable[[Client], Awaitable[T]]
    ) -> Future[T]:
        """Start `fn(client)` on the loop with the client of `settings`; return its future."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync service call inside the engine loop would wait on itself")
        return asyncio.run_coroutine_threadsafe(self._run(settings, fn), self.loop)

    async def _run[T](self, settings: EngineSettings, fn: Callable[[Client], Awaitable[T]]) -> T:
        return await fn(self._client(settings))

    def _client(self, settings: EngineSettings) -> Client:
        client = self._clients.get(settings)
        if client is not None:
            self._clients.move_to_end(settings)
            return client
        client = self._clients[settings] = Client(settings)
        while len(self._clients) > MOST_CLIENTS:
            _, old = self._clients.popitem(last=False)
            closing = self.loop.create_task(old.aclose())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        return client

    async def _close_all(self) -> None:
        clients, self._clients = list(self._clients.values()), OrderedDict()
        await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)

    def close(self) -> None:
        """Close every client (waiting at most CLOSE_WAIT_S) and stop the loop."""
        done = asyncio.run_coroutine_threadsafe(self._close_all(), self.loop)
        try:
            done.result(CLOSE_WAIT_S)
        except Exception as exc:  # exiting anyway: say why the connections were left open
            log.warning("engine loop close failed error=%r", exc)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(CLOSE_WAIT_S)


_current: EngineLoop | None = None
_lock = threading.Lock()


def engine_loop() -> EngineLoop:
    """Return the process's engine loop, started on first use."""
    global _current
    with _lock:
        if _current is None:
            _current = EngineLoop()
        return _current


def call[T](settings: EngineSettings, fn: Callable[[Client], Awaitable[T]]) -> T:
    """Run `fn(client)` on the engine loop and wait for its result (from sync code)."""
    return engine_loop().submit(settings, fn).result()


async def acall[T](settings: EngineSettings, fn: Callable[[Client], Awaitable[T]]) -> T:
    """Run `fn(client)` on the engine loop from another loop; cancelling it cancels the call."""
    return await asyncio.wrap_future(engine_loop().submit(settings, fn))


# Sync clients kept open, one per EngineSettings (the least recently used beyond MOST_CLIENTS
# is closed); every thread shares them (redis-py's blocking pool is thread-safe).
_sync_clients: OrderedDict[EngineSettings, SyncClient] = OrderedDict()
_sync_lock = threading.Lock()
# The settings object last asked for and its client: the next call with the very same object
# (engine_settings() is cached) skips the lock and the settings' hash, on every enqueue.
_last_sync: tuple[EngineSettings, SyncClient] | None = None


def sync_client(settings: EngineSettings) -> SyncClient:
    """Return the process's sync client of `settings` (made on first use)."""
    global _last_sync
    last = _last_sync
    if last is not None and last[0] is settings:
        return last[1]
    with _sync_lock:
        client = _sync_clients.get(settings)
        if client is not None:
            _sync_clients.move_to_end(settings)
        else:
            client = _sync_clients[settings] = SyncClient(settings)
            while len(_sync_clients) > MOST_CLIENTS:
                _sync_clients.popitem(last=False)[1].close()
        _last_sync = (settings, client)
        return client


# An enqueue from async code runs on the caller's own loop, on a client of that loop (as fast as
# the engine's own client: no hop); kept per loop, dropped with it.
_loop_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = (
    weakref.WeakKeyDictionary()
)


def loop_client(settings: EngineSettings) -> Client:
    """Return the running loop's client of `settings` (a `session()`'s inside one)."""
    shared = _session_client()
    if shared is not None:
        return shared
    loop = asyncio.get_running_loop()
    client = _loop_clients.get(loop)
    if client is None or client.settings != settings:
        client = _loop_clients[loop] = Client(settings)
    return client


def _forget_in_child() -> None:
    """A forked child has no engine thread: let it start its own (the parent's sockets stay)."""
    global _current, _lock, _sync_lock, _last_sync
    _current, _lock = None, threading.Lock()
    _sync_clients.clear()  # their pools belong to the parent's sockets
    _last_sync = None
    _loop_clients.clear()
    _sync_lock = threading.Lock()


def _close_at_exit() -> None:
    with _lock:
        if _current is not None:
            _current.close()
    global _last_sync
    with _sync_lock:
        _last_sync = None
        while _sync_clients:
            _sync_clients.popitem()[1].close()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_close_at_exit)


# The client `session()` shares with the calls in its block, and the event loop it belongs to.
_shared: ContextVar[tuple[asyncio.AbstractEventLoop, Client] | None] = ContextVar(
    "jobsite_engine_client", default=None
)


def _session_client() -> Client | None:
    """Return the client of the enclosing `session()` on the running loop, if any."""
    shared = _shared.get()
    return shared[1] if shared is not None and shared[0] is asyncio.get_running_loop() else None


@asynccontextmanager
async def session() -> AsyncIterator[None]:
    """Share one engine client among the async service calls inside the block; close it after.

    For a websocket, whose calls should stay on its own event loop for its whole life. Outside
    a session, calls run on the process's engine loop (below) and its pooled client.
    Tasks started in the block must end within it.
    """
    if _session_client() is not None:
        yield
        return
    async with Client(engine_settings()) as client:
        token = _shared.set((asyncio.get_running_loop(), client))
        try:
            yield
        finally:
            _shared.reset(token)


def twins[**P, T](
    operation: Callable[Concatenate[Client, P], Awaitable[T]],
) -> tuple[Callable[P, T], Callable[P, Coroutine[Any, Any, T]]]:
    """Return the sync function and the async twin of an engine operation `_name(client, ...)`.

    Both run it on the engine loop's long-lived client; the async twin inside a `session()`
    runs it on the session's client instead. An operation talks to Redis only: the ORM belongs
    to the caller's thread (its connection, its transaction), never to the engine loop's.
    Whether Redis answered is noted in services/reach.py, the process's one view of it.
    """
    name = operation.__name__.lstrip("_")

    async def noted(client: Client, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            result = await operation(client, *args, **kwargs)
        except RedisUnavailable as exc:
            reach.failed(exc)
            raise
        reach.answered()
        return result

    async def async_twin(*args: P.args, **kwargs: P.kwargs) -> T:
        client = _session_client()
        if client is not None:
            return await noted(client, *args, **kwargs)
        return await acall(engine_settings(), lambda c: noted(c, *args, **kwargs))

    def sync_twin(*args: P.args, **kwargs: P.kwargs) -> T:
        return call(engine_settings(), lambda c: noted(c, *args, **kwargs))

    for twin, twin_name in ((sync_twin, name), (async_twin, f"a{name}")):
        twin.__name__ = twin.__qualname__ = twin_name
        twin.__doc__ = operation.__doc__
        twin.__module__ = operation.__module__
    return sync_twin, async_twin
