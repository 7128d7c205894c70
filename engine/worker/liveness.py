"""Worker liveness renewed by a thread with its own event loop and Redis connection.

A blocked event loop (a coroutine calling time.sleep) or a CPU-bound task cannot stop it, so a
live worker keeps its jobs however busy it is; a dead one stops renewing at once, and the
cleaner hands its jobs back within `liveness_window_s`, without waiting for their leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable

from ..ops.probe import StatusFile
from ..resources.duties.presence import Presence
from ..settings import EngineSettings
from ..transport.connection import connect
from ..transport.reconnect import Reconnect

log = logging.getLogger("engine.liveness")


class Liveness:
    """Renew `alive:<worker>` every quarter of the window from a thread of its own."""

    def __init__(
        self, settings: EngineSettings, worker_id: str, on_crash: Callable[[BaseException], object]
    ) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.on_crash = on_crash
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        # Since when (monotonic) every renewal succeeded; None: the last one failed. Written by
        # the thread, read by the worker's cleaner.
        self._ok_since: float | None = None
        self._thread = threading.Thread(target=self._main, name="liveness", daemon=True)
        # What a probe on this host reads (engine/ops/probe.py); `state` is set by the worker.
        self.status_file = StatusFile(settings, worker_id)
        self.status = self.status_file.status
        # The worker's event loop: each beat asks it to stamp `status.loop_at`.
        self.worker_loop: asyncio.AbstractEventLoop | None = None

    def start(self, worker_loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start renewing; wait (at most the connect timeout) for the first renewal."""
        self.worker_loop = worker_loop
        self._thread.start()
        self.ready.wait(self.settings.connect_timeout_s + 1)

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop renewing and remove the key (a clean exit hands its jobs back itself); wait for
        the thread at most `timeout_s` (default: a command's timeout and a second). A thread
        left behind is a daemon: its key lapses within the window."""
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the thread's loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread.is_alive():
            wait_s = self.settings.socket_timeout_s + 1 if timeout_s is None else timeout_s
            self._thread.join(timeout=wait_s)
        self.status_file.remove()

    def steady_s(self) -> float | None:
        """Return how long renewals have succeeded without a failure (None: the last failed).

        A renewal cannot hang: its connection times out after half a window, a failure.
        """
        ok_since = self._ok_since
        return None if ok_since is None else time.monotonic() - ok_since

    def _stamp(self) -> None:
        """Write the status file with this beat, and ask the worker's loop to stamp itself."""
        self.status.beat_at = time.time()
        self.status_file.write()
        if self.worker_loop is not None:
            with contextlib.suppress(RuntimeError):  # the worker's loop closed
                self.worker_loop.call_soon_threadsafe(self._loop_ran)

    def _loop_ran(self) -> None:
        self.status.loop_at = time.time()

    def _main(self) -> None:
        try:
            asyncio.run(self._beat())
        except BaseException as exc:  # a bug here: the worker must not live on unseen
            log.critical("liveness thread crashed worker=%s", self.worker_id, exc_info=exc)
            self.on_crash(exc)

    async def _beat(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        s = self.settings
        redis = connect(s, timeout_s=s.liveness_window_s / 2)
        presence = Presence(s, redis, self.worker_id)
        window_ms = int(s.liveness_window_s * 1000)
        # A beat waits for a renewal that times out (half a window) and this backoff: a quarter
        # window at most keeps the beats of a worker whose Redis is away within the two
        # windows a live probe allows (a fixed 1 s cap did not, for a window under 2 s).
        retry = Reconnect("liveness", cap_s=min(1.0, s.liveness_window_s / 4))
        try:
            while not self._stop.is_set():
                self._stamp()
                try:
                    now_ms = int(time.time() * 1000)
                    await presence.renew_alive(now_ms, window_ms)
                    retry.ok()
                    self._ok_since = self._ok_since or time.monotonic()
                    self.status.renewed_at = time.time()
                    self.ready.set()
                except Exception as exc:
                    self._ok_since = None
                    await retry.failed(exc)
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), s.liveness_window_s / 4)
            with contextlib.suppress(Exception):
                await presence.drop_alive()
        finally:
            await redis.aclose()
