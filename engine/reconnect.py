"""Capped exponential backoff with jitter for loops that lost Redis; quiet logging."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

from .connection import CONNECTION_ERRORS

log = logging.getLogger("engine.reconnect")


class Reconnect:
    """Sleep after a Redis error: 0.05 s doubling to `cap_s`, with jitter.

    All loops of a process share one log limiter: at most one warning per second.
    """

    _last_log = 0.0

    def __init__(self, loop_name: str, cap_s: float = 1.0) -> None:
        self.loop_name = loop_name
        self.cap_s = cap_s
        self.failures = 0

    async def failed(self, exc: BaseException) -> None:
        """Record a failure, log it (rate-limited) and wait before the next try."""
        self.failures += 1
        now = time.monotonic()
        if now - Reconnect._last_log >= 1.0:
            Reconnect._last_log = now
            log.warning(
                "redis unavailable loop=%s failures=%d error=%s",
                self.loop_name,
                self.failures,
                type(exc).__name__,
            )
        delay = min(self.cap_s, 0.05 * 2 ** min(self.failures, 10))
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))

    def ok(self) -> None:
        """Record a success; log recovery after an outage."""
        if self.failures:
            log.info(
                "redis reachable again loop=%s after_failures=%d", self.loop_name, self.failures
            )
            self.failures = 0


async def run_periodic(
    name: str, step: Callable[[], Awaitable[float]], stopping: asyncio.Event
) -> None:
    """Run `step` (which returns seconds to sleep) until `stopping`; never exit on an error."""
    retry = Reconnect(name)
    while not stopping.is_set():
        try:
            sleep_s = await step()
            retry.ok()
        except CONNECTION_ERRORS as exc:
            await retry.failed(exc)
            continue
        except Exception:
            log.exception("tick failed loop=%s; going on", name)
            sleep_s = 1.0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), timeout=sleep_s)
