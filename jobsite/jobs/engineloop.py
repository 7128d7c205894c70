"""The process's engine loop: one daemon thread running an event loop, and the engine clients
it keeps open, which serve every service call made outside a `services.session()`.

`async_to_sync` makes a new event loop for each call, and an engine client belongs to one
loop, so each sync call used to open a connection, name it, register its queue and close it
again: 3.2 ms to enqueue one job from a view. Here a call is one hop to this thread and back,
on pooled connections. The hop carries the caller's context variables (trace context).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import Future

from engine import Client, EngineSettings

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


def _forget_in_child() -> None:
    """A forked child has no engine thread: let it start its own (the parent's sockets stay)."""
    global _current, _lock
    _current, _lock = None, threading.Lock()


def _close_at_exit() -> None:
    with _lock:
        if _current is not None:
            _current.close()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_close_at_exit)
