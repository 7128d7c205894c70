"""Capped exponential backoff with jitter for loops that lost Redis; quiet logging; bugs raise."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable

from .faults import Fault, classify, refusal

log = logging.getLogger("engine.reconnect")
# The longest backoff sleep of a loop by default (the worker's upkeep, the cleaner, the
# scheduler): health counts it in the time a live worker takes to renew after an outage.
BACKOFF_CAP_S = 1.0

# Bumped when Redis is known to be back (a new master found after a failover): every backoff
# sleep in the process, in any thread, ends at once instead of sleeping on.
_wakes = [0]
# The backoff sleeps under way, each with its loop: wake_all ends them (no polling: a worker
# whose Redis is down wakes only for its retries).
_sleeping: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()
_sleeping_lock = threading.Lock()


def wake_all() -> None:
    """End every backoff sleep of the process now: Redis is worth trying again."""
    _wakes[0] += 1
    with _sleeping_lock:
        sleeping = list(_sleeping)
    for loop, woken in sleeping:
        with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
            loop.call_soon_threadsafe(_end_sleep, woken)


def _end_sleep(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


class Reconnect:
    """Decide what a loop's exception means; sleep after a Redis failure, re-raise a bug.

    Sleeps 0.05 s doubling to `cap_s`, with jitter. All loops of a process share one log
    limiter: at most one warning per second. `transient` adds the caller's own retryable
    exception types (a database connection that dropped, say).
    """

    _last_log = 0.0

    def __init__(
        self,
        loop_name: str,
        cap_s: float = BACKOFF_CAP_S,
        transient: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.loop_name = loop_name
        self.cap_s = cap_s
        self.transient = transient
        self.failures = 0
        self._wakes_seen = _wakes[0]

    async def failed(self, exc: BaseException) -> None:
        """Back off after a Redis failure (logged at most once a second); re-raise anything else."""
        fault = classify(exc, self.transient)
        if fault is Fault.BUG:
            raise exc
        if _wakes[0] != self._wakes_seen:  # Redis moved since: back off as after a first failure
            self._wakes_seen = _wakes[0]
            self.failures = 0
        self.failures += 1
        now = time.monotonic()
        if now - Reconnect._last_log >= 1.0 and classify(exc) is Fault.BUG:
            # One of the caller's own `transient` failures (a database's), not Redis'.
            Reconnect._last_log = now
            detail = str(exc).strip().splitlines()
            log.warning(
                "loop failing; retrying loop=%s failures=%d error=%s detail=%r",
                self.loop_name,
                self.failures,
                type(exc).__name__,
                detail[0][:200] if detail else "-",
            )
        elif now - Reconnect._last_log >= 1.0:
            Reconnect._last_log = now
            log.warning(
                "redis %s loop=%s failures=%d error=%s reason=%s",
                "refused" if fault is Fault.REFUSED else "unavailable",
                self.loop_name,
                self.failures,
                type(exc).__name__,
                refusal(exc) or "-",
            )
        delay = min(self.cap_s, 0.05 * 2 ** min(self.failures, 10))
        await _backoff(delay * random.uniform(0.5, 1.0))

    def ok(self) -> None:
        """Record a success; log recovery after an outage."""
        if self.failures:
            log.info(
                "redis reachable again loop=%s after_failures=%d", self.loop_name, self.failures
            )
            self.failures = 0


async def _backoff(delay_s: float) -> None:
    """Sleep `delay_s`, or less if `wake_all` is called meanwhile."""
    loop = asyncio.get_running_loop()
    entry = (loop, loop.create_future())
    with _sleeping_lock:
        _sleeping.add(entry)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(entry[1], delay_s)
    finally:
        with _sleeping_lock:
            _sleeping.discard(entry)


async def run_periodic(
    name: str,
    step: Callable[[], Awaitable[float]],
    stopping: asyncio.Event,
    transient: tuple[type[BaseException], ...] = (),
) -> None:
    """Run `step` (which returns seconds to sleep) until `stopping`.

    Redis failures (and `transient` ones) are retried with backoff; anything else is a bug and
    propagates, so that the process stops instead of living on without this loop.
    """
    retry = Reconnect(name, transient=transient)
    while not stopping.is_set():
        try:
            sleep_s = await step()
            retry.ok()
        except Exception as exc:
            await retry.failed(exc)
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=sleep_s)
