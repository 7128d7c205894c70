"""A running job's progress, checkpoint and log lines: held while Redis is away, written when it
answers.

A task's `set_progress`, `checkpoint` and `log` must never fail its job because Redis stalled or
restarted: a write that fails on Redis is kept (in order, per job) and a background drain
retries it with the engine's backoff. Writes stay fenced by the job's token, so a job whose
lease was lost meanwhile gets its held writes refused (counted like any refused write) and
dropped. Progress and checkpoint are latest values (LATEST): a newer one replaces one still
held. At most `max_held` lines are held per job (the oldest go first, as in the job's own log).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..job import Job
from ..transport.faults import Fault, classify
from ..transport.reconnect import Reconnect

log = logging.getLogger("engine.sidewrites")

# A write: the job and the coroutine factory that writes it, returning the script's code.
Write = Callable[[], Awaitable[int]]
# The writes of which only the newest counts, written after the held lines in this order.
LATEST = ("progress", "checkpoint")


@dataclass(eq=False, slots=True)
class _Held:
    """What one job still has to write, oldest first."""

    job: Job
    lines: deque[tuple[str, Write]]
    # The newest write of each of LATEST still held, by name.
    latest: dict[str, Write] = field(default_factory=dict)
    dropped: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


class SideWrites:
    """Write progress, checkpoints and log lines now, or hold them until Redis answers again."""

    def __init__(
        self,
        on_code: Callable[[Job, str, int], None],
        on_done: Callable[[asyncio.Task[None]], object],
        max_held: int,
    ) -> None:
        self.on_code = on_code  # told each written (or refused) write's code
        self.on_done = on_done  # told when the drain ends (a bug in it ends it with an error)
        self.max_held = max(1, max_held)
        self._held: dict[str, _Held] = {}
        self._drain: asyncio.Task[None] | None = None

    def holds(self, job: Job) -> bool:
        """Tell whether `job` still has writes waiting for Redis."""
        return bool(self._held) and _key(job) in self._held

    async def write(self, job: Job, name: str, write: Write) -> None:
        """Write now; if Redis fails (or writes of this job wait already), hold it instead."""
        held = self._held.get(_key(job)) if self._held else None
        if held is None:
            try:
                self.on_code(job, name, await write())
                return
            except Exception as exc:
                if classify(exc) is Fault.BUG:
                    raise
                log.info("held a write until redis answers job=%s write=%s", job.id, name)
                held = self._held.setdefault(_key(job), _Held(job, deque()))
        if name in LATEST:
            held.latest[name] = write
        else:
            if len(held.lines) >= self.max_held:
                held.lines.popleft()
                held.dropped += 1
            held.lines.append((name, write))
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._drain_all())
            self._drain.add_done_callback(self.on_done)

    async def settle(self, job: Job, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) until `job`'s held writes are written or refused."""
        held = self._held.get(_key(job))
        if held is not None:
            try:
                await asyncio.wait_for(held.done.wait(), timeout_s)
            except TimeoutError:
                log.warning("job ends with writes still held job=%s", job.id)

    async def close(self) -> None:
        """Stop the drain (what is still held is lost with the worker)."""
        if self._drain is not None:
            self._drain.cancel()
            await asyncio.gather(self._drain, return_exceptions=True)

    async def _drain_all(self) -> None:
        retry = Reconnect("sidewrites")
        while self._held:
            key, held = next(iter(self._held.items()))
            if held.lines:
                name, write = held.lines[0]
            elif held.latest:
                name = next(n for n in LATEST if n in held.latest)
                write = held.latest[name]
            else:
                del self._held[key]
                held.done.set()
                if held.dropped:
                    log.warning("held lines dropped job=%s count=%d", held.job.id, held.dropped)
                continue
            try:
                code = await write()
            except Exception as exc:
                await retry.failed(exc)  # a bug raises: the worker's guard sees the task die
                continue
            retry.ok()
            self.on_code(held.job, name, code)
            if code < 0:  # the lease is gone: every other write of this job is refused too
                held.lines.clear()
                held.latest.clear()
            elif name in LATEST:
                if held.latest.get(name) is write:  # none newer came while it was written
                    del held.latest[name]
            else:
                held.lines.popleft()


def _key(job: Job) -> str:
    return job.token or job.id
