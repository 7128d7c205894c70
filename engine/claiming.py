"""The worker's claim path: claim batches while slots are free, one Running per claimed job."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from . import failpoints
from .context import JobContext
from .isolate import Lanes
from .job import Job
from .keys import QueueKeys
from .reconnect import Reconnect
from .runner import options_for
from .scripts import Scripts
from .settings import EngineSettings
from .task import Registry
from .upkeep import Running, Upkeep


class ClaimSteps:
    """Part of Worker: the claim loop and the claim script's rows turned into Running jobs."""

    settings: EngineSettings
    id: str
    queues: list[QueueKeys]
    concurrency: int
    queue_limits: dict[str, int]
    burst: bool
    scripts: Scripts
    registry: Registry
    lane: Lanes | None
    upkeep: Upkeep
    _active: dict[str, Running]
    _slot_free: asyncio.Event
    _stopping: asyncio.Event
    _claim_retry: Reconnect

    if TYPE_CHECKING:  # Worker's own steps, which these call

        async def _admit(self, claimed: list[Running]) -> None: ...
        async def _drained(self) -> bool: ...
        async def _wait_for_work(self) -> None: ...
        async def _write_progress(self, job: Job, pct: float, message: str) -> None: ...
        async def _write_log(self, job: Job, message: str) -> None: ...

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            free = self.concurrency - len(self._active)
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            try:
                claimed = await self._claim(free)
                self._claim_retry.ok()
            except Exception as exc:
                await self._claim_retry.failed(exc)
                continue
            if claimed:
                failpoints.hit("after_claim")
                await self._admit(claimed)
                continue
            if self.burst and await self._drained():
                return
            await self._wait_for_work()

    async def _claim(self, free: int) -> list[Running]:
        out: list[Running] = []
        for keys in self.queues:
            want = min(free - len(out), self.settings.claim_batch)
            limit = self.queue_limits.get(keys.queue)
            if limit is not None:
                want = min(want, limit - sum(1 for r in self._active.values() if r.keys == keys))
            if want <= 0:
                continue
            rows = await self.scripts.claim(
                keys,
                events_maxlen=self.settings.events_maxlen,
                max_jobs=want,
                lease_ms=self.settings.lease_ms,
                worker_id=self.id,
                result_ttl_ms=self.settings.default_result_ttl_s * 1000,
                most_suspects=self._suspects_wanted(out),
            )
            for row in rows:
                size = len(row.args or "") + len(row.kwargs or "")
                poison = None
                if size > self.settings.max_payload_bytes:
                    row = row._replace(args="[]", kwargs="{}")
                    poison = f"payload of {size} bytes is over {self.settings.max_payload_bytes}"
                job = Job.from_claim(keys.queue, row)
                task = self.registry.get(job.task, job.version)
                opts = options_for(task, job) if task is not None else None
                ctx = JobContext(
                    job,
                    self.id,
                    self._write_progress,
                    asyncio.get_running_loop(),
                    self.upkeep.parent_results,
                    self._write_log,
                )
                rec = Running(job, keys, task, opts, ctx, poison=poison)
                self._active[job.token or job.id] = rec
                out.append(rec)
        return out

    def _suspects_wanted(self, claimed: list[Running]) -> int:
        """Return how many suspects to claim: one per idle isolation child (-1: any)."""
        if self.lane is None:
            return -1
        busy = sum(1 for r in self._active.values() if r.job.stalls > 0)
        return max(0, self.lane.size - busy)
