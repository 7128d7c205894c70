"""The worker's way out: fence claims, hand back what did not begin, wait out the grace period."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..dev import failpoints
from ..errors import RedisUnavailable
from ..resources.duties.presence import Presence
from ..running.runner import Kind, Outcome, StopReason
from .book import Book
from .claimer import Claimer
from .context import WorkerContext

log = logging.getLogger("engine.worker")


class Shutdown:
    """Stop a worker: no claim after the fence, parked jobs back, running ones given the grace."""

    def __init__(self, ctx: WorkerContext, book: Book, claimer: Claimer) -> None:
        self.settings = ctx.settings
        self.worker_id = ctx.worker_id
        self.presence = Presence(ctx.settings, ctx.redis, ctx.worker_id)
        self.life = ctx.life
        self.book = book
        self.claimer = claimer  # its queues are the worker's now (a role may change them)
        self.fencing: asyncio.Task[None] | None = None
        ctx.life.on_stop(self.fence)  # at the stop (or a crash), at once

    def fence(self) -> None:
        """Fence claims on the server too, for a claim already queued there (at the stop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # stopped before it ran: nothing was queued on the server
            log.info("worker stopping id=%s claims=off", self.worker_id)
            return
        self.fencing = loop.create_task(self._fence_claims())

    async def _fence_claims(self) -> None:
        """Mark this worker stopping in each queue's meta, so no claim of its runs after this.

        An idle worker's next claim already waits on the server behind its BZPOPMIN
        (Claimer._wait_for_work): the fence makes it claim nothing, however late a job comes.
        Logged once it holds: a job enqueued after the line is never claimed here.
        """
        try:
            await self.presence.fence(self.claimer.queues)
        except RedisUnavailable as exc:  # no claim reaches Redis either, then
            log.warning("could not fence claims worker=%s error=%r", self.worker_id, exc)
        log.info("worker stopping id=%s claims=off", self.worker_id)

    async def unfence(self) -> None:
        """Remove the stop fields at exit (best effort: a leftover field fences only this id)."""
        if self.fencing is None:
            return
        await self.fencing
        try:
            await self.presence.unfence(self.claimer.queues)
        except RedisUnavailable as exc:
            log.warning("could not remove the claim fence worker=%s error=%r", self.worker_id, exc)

    async def run(self) -> None:
        """Hand back jobs not begun, give running ones the grace period, then apply on_shutdown."""
        for rec in self.book.unpark_all():
            failpoints.hit("during_handback")
            error = {"type": "Shutdown", "message": "claimed, not begun"}
            self.book.forget(rec)
            self.book.flusher.add(Outcome(rec.job, Kind.RELEASE, error=error))
        running = self.book.handles()
        if running:
            log.info(
                "shutdown: waiting worker=%s running=%d grace_s=%s",
                self.worker_id,
                len(running),
                self.settings.shutdown.grace_s,
            )
            await self._wait_running(self.settings.shutdown.grace_s)
        for rec in list(self.book.active.values()):
            policy = rec.opts.on_shutdown if rec.opts else "resubmit"
            if policy != "continue" or self.life.crashed is not None:
                failpoints.hit("during_handback")
                rec.stop(self._stop_reason(policy))
        await self._wait_running(None)

    def _stop_reason(self, policy: str) -> StopReason:
        """Return how a job is stopped: `stop` ends it stalled; anything else, and every job
        after a crash (not the job's fault), goes back to its queue as it was."""
        if policy == "stop" and self.life.crashed is None:
            return StopReason.STOP
        return StopReason.RESUBMIT

    async def _wait_running(self, timeout_s: float | None) -> None:
        """Wait for running jobs, at most `timeout_s`; a second signal stops the rest now."""
        handles = self.book.handles()
        if not handles:
            return
        all_done: asyncio.Future[Any] = asyncio.gather(*handles, return_exceptions=True)
        forced: asyncio.Future[Any] = asyncio.ensure_future(self.life.forced.wait())
        await asyncio.wait(
            [all_done, forced], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if forced.done():  # a second signal: each job stops now, as its policy says
            for rec in list(self.book.active.values()):
                rec.stop(self._stop_reason(rec.opts.on_shutdown if rec.opts else "resubmit"))
            await all_done
        forced.cancel()
