"""Lease renewal for running jobs and the worker registry entry, on the worker's own timer."""

from __future__ import annotations

import os
import socket
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import serializer
from ..job import Job
from ..keys import QueueKeys
from ..resources.duties.parents import Parents
from ..resources.duties.presence import Presence
from ..seam.hashformat import READS
from ..seam.scripts import RenewJob
from .context import WorkerContext
from .recycle import rss_mib

if TYPE_CHECKING:
    from .unit import RunningJob


class Upkeep:
    """Renew leases (fenced by token) and keep this worker's registry entry fresh."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.settings = ctx.settings
        self.scripts = ctx.scripts
        self.worker_id = ctx.worker_id
        self.started_at_ms = int(time.time() * 1000)
        self.parents = Parents(ctx.settings, ctx.redis)
        self.presence = Presence(ctx.settings, ctx.redis, ctx.worker_id)

    async def renew(self, records: Sequence[RunningJob]) -> list[tuple[RunningJob, int]]:
        """Renew every lease; return (record, code) with 0 ok, 1 cancel requested, -2 lease lost."""
        by_queue: dict[QueueKeys, list[RunningJob]] = defaultdict(list)
        for rec in records:
            by_queue[rec.keys].append(rec)
        out: list[tuple[RunningJob, int]] = []
        for keys, recs in by_queue.items():
            jobs: list[RenewJob] = []
            for rec in recs:
                lease_ms = rec.lease_ms(self.settings.lease_ms)
                jobs.append(RenewJob(rec.job.id, rec.job.token or "", lease_ms, rec.ctx.touched))
                rec.ctx.touched = False
            codes = await self.scripts.heartbeat(keys, jobs=jobs)
            out.extend(zip(recs, codes, strict=True))
        return out

    async def progress(self, job: Job, pct: float, message: str) -> int:
        """Store a running job's progress, fenced by its token; return the script's code."""
        keys = QueueKeys(self.settings.prefix, job.queue)
        return await self.scripts.progress(
            keys,
            events_maxlen=self.settings.stream.emergency_maxlen,
            job_id=job.id,
            token=job.token or "",
            percent=pct,
            message=message,
            worker_id=self.worker_id,
        )

    async def log(self, job: Job, message: str, line_id: str = "") -> int:
        """Append a line to a running job's log, fenced by its token; return the script's code."""
        keys = QueueKeys(self.settings.prefix, job.queue)
        return await self.scripts.log(
            keys,
            events_maxlen=self.settings.stream.emergency_maxlen,
            job_id=job.id,
            token=job.token or "",
            message=message,
            worker_id=self.worker_id,
            max_lines=self.settings.job_log.max_lines,
            max_bytes=self.settings.job_log.max_bytes,
            line_id=line_id,
        )

    async def checkpoint(self, job: Job, state: bytes) -> int:
        """Save a running job's checkpoint (b"": delete it), fenced by its token; return the
        script's code."""
        keys = QueueKeys(self.settings.prefix, job.queue)
        return await self.scripts.checkpoint(
            keys, job_id=job.id, token=job.token or "", state=state
        )

    async def parent_results(self, job: Job) -> dict[str, Any]:
        """Return the result of each of the job's parents, by id (None when it has none)."""
        return await self.parents.results(job.queue, job.parents)

    async def parent_errors(self, job: Job) -> dict[str, Any]:
        """Return the last error of each of the job's parents that did not complete, by id
        (None for one that completed)."""
        return await self.parents.errors(job.queue, job.parents)

    async def register(
        self,
        queues: Sequence[str],
        concurrency: int,
        records: Sequence[RunningJob],
        state: str = "claiming",
        role: str = "",
        tallies: Mapping[str, Mapping[str, int]] | None = None,
        versions: Sequence[str] = (),
    ) -> str | None:
        """Write this worker's registry entry (it expires unless renewed); return the order
        waiting for it ("quiet", "stop"; None: claim; engine/ops/control.py).

        With it go the process's resident memory, its outcomes per queue (`tallies`) and,
        when the entry is new, its task@versions (they never change while it runs)."""
        now_ms = int(time.time() * 1000)
        ttl_ms = max(int(self.settings.heartbeat_interval_s * 1000 * 6), 3000)
        current = [
            {"id": r.job.id, "queue": r.job.queue, "task": r.job.task} for r in records if r.handle
        ]
        info: dict[str, str] = {
            "id": self.worker_id,
            "host": socket.gethostname(),
            "pid": str(os.getpid()),
            "queues": ",".join(queues),
            "concurrency": str(concurrency),
            "started_at_ms": str(self.started_at_ms),
            "heartbeat_at_ms": str(now_ms),
            "current_jobs": serializer.dumps(current).decode(),
            # The hash formats it reads (engine/seam/hashformat.py checks before a move).
            "hash_formats": READS,
            # claiming, quiet, stopping or retiring (engine/ops/probe.py's Status.state)
            "state": state,
            # The role whose queues it follows ("": queues given at start; resources/roles.py).
            "role": role,
            # Resident memory now, MiB (a read of /proc/self/statm on Linux).
            "rss_mib": f"{rss_mib():.1f}",
            # queue -> {"completed": n, "failed": n} since it started (outcomes.TALLIED).
            "outcomes": serializer.dumps(dict(tallies or {})).decode(),
        }
        return await self.presence.register(info, ttl_ms, now_ms, versions)

    async def deregister(self) -> None:
        """Remove this worker from the registry."""
        await self.presence.deregister()
