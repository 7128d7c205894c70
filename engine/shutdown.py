"""The worker's way out: stop jobs, hand back what did not begin, wait out the grace period."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

from . import failpoints
from .errors import RedisUnavailable
from .keys import QueueKeys, stop_field
from .liveness import Liveness
from .runner import Kind, Outcome, StopReason
from .settings import EngineSettings
from .upkeep import Running, Upkeep

log = logging.getLogger("engine.worker")


class ShutdownSteps:
    """Part of Worker: stopping one job, and the whole shutdown sequence."""

    settings: EngineSettings
    id: str
    redis: Redis
    queues: list[QueueKeys]
    upkeep: Upkeep
    crashed: BaseException | None
    _active: dict[str, Running]
    _waiting: dict[str, deque[Running]]
    _outcomes: list[Outcome]
    _unflushed: int
    _flush_wanted: asyncio.Event
    _forced: asyncio.Event
    _stopping: asyncio.Event
    _fencing: asyncio.Task[None] | None
    liveness: Liveness

    if TYPE_CHECKING:  # Worker's own step, which these call

        def _forget(self, rec: Running) -> None: ...

    def _stop_job(self, rec: Running, reason: StopReason) -> None:
        """Stop a job: cancel its coroutine, tell sync code through job.cancelled."""
        if rec.stop_reason is not None:
            return
        rec.stop_reason = reason
        rec.ctx.cancel()
        if rec.handle is not None:
            rec.handle.cancel()
        else:
            self._drop_waiting(rec)

    def _drop_waiting(self, rec: Running) -> None:
        queue = self._waiting.get(rec.job.task)
        if queue and rec in queue:
            queue.remove(rec)
        self._forget(rec)

    def _fence(self) -> None:
        """Stop claiming: at once here, and on the server for a claim already queued there."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self.liveness.status.state == "claiming":
            self.liveness.status.state = "stopping"
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # stopped before it ran: nothing was queued on the server
            log.info("worker stopping id=%s claims=off", self.id)
            return
        self._fencing = loop.create_task(self._fence_claims())

    async def _fence_claims(self) -> None:
        """Mark this worker stopping in each queue's meta, so no claim of its runs after this.

        An idle worker's next claim already waits on the server behind its BZPOPMIN
        (Worker._wait_for_work): the fence makes it claim nothing, however late a job comes.
        Logged once it holds: a job enqueued after the line is never claimed here.
        """
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for keys in self.queues:
                    pipe.hset(keys.meta, stop_field(self.id), "1")
                await pipe.execute()
        except RedisUnavailable as exc:  # no claim reaches Redis either, then
            log.warning("could not fence claims worker=%s error=%r", self.id, exc)
        log.info("worker stopping id=%s claims=off", self.id)

    async def _unfence(self) -> None:
        """Remove the stop fields at exit (best effort: a leftover field fences only this id)."""
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for keys in self.queues:
                    pipe.hdel(keys.meta, stop_field(self.id))
                await pipe.execute()
        except RedisUnavailable as exc:
            log.warning("could not remove the claim fence worker=%s error=%r", self.id, exc)

    async def _shutdown(self) -> None:
        """Hand back jobs not begun, give running ones the grace period, then apply on_shutdown."""
        for queue in list(self._waiting.values()):
            while queue:
                rec = queue.popleft()
                failpoints.hit("during_handback")
                self._finish_waiting(rec)
        running = [r.handle for r in self._active.values() if r.handle is not None]
        if running:
            log.info(
                "shutdown: waiting worker=%s running=%d grace_s=%s",
                self.id,
                len(running),
                self.settings.shutdown_grace_s,
            )
            await self._wait_running(self.settings.shutdown_grace_s)
        for rec in list(self._active.values()):
            policy = rec.opts.on_shutdown if rec.opts else "stop"
            if self.crashed is not None:
                # Not the job's fault: hand it back as it was.
                self._stop_job(rec, StopReason.RESUBMIT)
            elif policy != "continue":
                failpoints.hit("during_handback")
                self._stop_job(
                    rec, StopReason.RESUBMIT if policy == "resubmit" else StopReason.STOP
                )
        await self._wait_running(None)

    def _finish_waiting(self, rec: Running) -> None:
        self._forget(rec)
        self._outcomes.append(
            Outcome(
                rec.job, Kind.RELEASE, error={"type": "Shutdown", "message": "claimed, not begun"}
            )
        )
        self._unflushed += 1
        self._flush_wanted.set()

    async def _wait_running(self, timeout_s: float | None) -> None:
        """Wait for running jobs, at most `timeout_s`; a second signal stops the rest now."""
        handles = [r.handle for r in self._active.values() if r.handle is not None]
        if not handles:
            return
        all_done: asyncio.Future[Any] = asyncio.gather(*handles, return_exceptions=True)
        forced: asyncio.Future[Any] = asyncio.ensure_future(self._forced.wait())
        await asyncio.wait(
            [all_done, forced], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if forced.done():
            # After a crash the jobs are not at fault: they go back as they were.
            how = StopReason.RESUBMIT if self.crashed is not None else StopReason.STOP
            for rec in list(self._active.values()):
                self._stop_job(rec, how)
            await all_done
        forced.cancel()

    async def _deregister(self) -> None:
        try:
            await self.upkeep.deregister()
        except RedisUnavailable:
            log.warning("could not deregister worker=%s (redis unavailable)", self.id)
