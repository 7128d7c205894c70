"""Make outcomes durable as they come: a batch forms only while earlier writes are in flight."""

from __future__ import annotations

import asyncio
import time
from array import array
from collections.abc import Callable, Iterable, Iterator

from ..dev import failpoints
from ..running.runner import Outcome
from ..transport.reconnect import Reconnect
from .lifecycle import Lifecycle
from .outcomes import OutcomeWriter

# Outcome writes in flight at once: an outcome goes to Redis as soon as its job ends while fewer
# are in flight (its window to a SIGKILL is one round trip); beyond, outcomes gather into the
# next write, so batches form only under load.
MAX_FLUSHES = 2
# How many windows (job end -> outcome durable, seconds) a worker keeps for its benchmark.
WINDOWS_KEPT = 10_000


class Windows:
    """The latest `size` windows, oldest first, as doubles in one array (no float objects).

    A deque of floats kept one object per window, each made while its batch's objects were
    alive: after a busy spell the survivors held the interpreter's 1 MiB arenas of that spell
    (pymalloc frees an arena only once it is empty): a soak found these floats among the last
    objects pinning sparse arenas (docs/benchmarks.md).
    """

    def __init__(self, size: int) -> None:
        self._values = array("d", bytes(8 * size))
        self._next = 0
        self._count = 0

    def extend(self, values: Iterable[float]) -> None:
        """Keep `values`, dropping the oldest beyond the size."""
        kept, at, size = self._values, self._next, len(self._values)
        n = 0
        for value in values:
            kept[at] = value
            at += 1
            if at == size:
                at = 0
            n += 1
        self._next = at
        self._count = min(self._count + n, size)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[float]:
        start = (self._next - self._count) % len(self._values)
        for i in range(self._count):
            yield self._values[(start + i) % len(self._values)]


class Flusher:
    """Queue ended jobs' outcomes and write them, up to MAX_FLUSHES writes in flight."""

    def __init__(self, writer: OutcomeWriter, life: Lifecycle) -> None:
        self.writer = writer
        self.life = life  # a write that dies of a bug crashes the worker
        # Told after each write (the Book sets it: claims wait on unwritten outcomes too).
        self.on_written: Callable[[], None] = _nothing
        self.queued: list[Outcome] = []
        self._flying: dict[asyncio.Task[None], list[Outcome]] = {}
        # Outcomes queued or being written: a worker holds back claims past `concurrency` of them.
        self.unflushed = 0
        self.wanted = asyncio.Event()
        self._error: BaseException | None = None  # the last failed write (backs off)
        self._retry = Reconnect("flush")
        # Seconds from a job's end to its outcome durable in Redis, the latest WINDOWS_KEPT.
        self.windows = Windows(WINDOWS_KEPT)

    def add(self, outcome: Outcome) -> None:
        """Queue an ended job's outcome; it is written at once unless writes are in flight."""
        outcome.ended_at = time.monotonic()
        self.queued.append(outcome)
        self.unflushed += 1
        self.wanted.set()

    def pending(self) -> Iterator[Outcome]:
        """Yield the outcomes not durable yet: queued or being written."""
        yield from self.queued
        for batch in self._flying.values():
            yield from batch

    async def run(self, done: Callable[[], bool]) -> None:
        """Write outcomes until `done()` holds and none is left; a failed write backs off."""
        flying = self._flying
        try:
            while True:
                await self.wanted.wait()
                self.wanted.clear()
                if self._error is not None:  # back off before writing again
                    error, self._error = self._error, None
                    await self._retry.failed(error)
                while self.queued and len(flying) < MAX_FLUSHES:
                    failpoints.bug("bug_in_flush")
                    batch, self.queued = self.queued, []
                    write = asyncio.create_task(self._write(batch))
                    flying[write] = batch
                    write.add_done_callback(self.life.crash_on_bug)
                if done() and not self.queued and not flying:
                    return
        finally:
            for write in flying:
                write.cancel()
            await asyncio.gather(*flying, return_exceptions=True)

    async def _write(self, batch: list[Outcome]) -> None:
        """Write one batch; what is not written (Redis gone or refusing) goes back ahead of the
        newer outcomes, and the flusher backs off. Rewriting one is safe: the fenced scripts
        refuse what this worker no longer owns."""
        try:
            unwritten, error = await self.writer.write(batch)
        finally:
            me = asyncio.current_task()
            if me is not None:
                self._flying.pop(me, None)
        self.unflushed -= len(batch) - len(unwritten)
        self.on_written()
        if error is not None:
            self.queued[:0] = unwritten
            self._error = error
        else:
            self._retry.ok()
            now = time.monotonic()
            self.windows.extend(now - o.ended_at for o in batch)
        self.wanted.set()


def _nothing() -> None:
    pass
