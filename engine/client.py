"""The client: enqueue, get, wait, dead-letter queue, counts."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from . import serializer
from .errors import Code, ConfigError, DuplicateJob, JobNotFound, JobTimeout
from .fields import both, either
from .job import TERMINAL_STATES, Job, JobState
from .keys import (
    QueueKeys,
    check_job_id,
    queue_keys,
    queues_key,
    worker_key,
    workers_key,
)
from .limits import rate_interval_ms
from .ops import clearing, control, gaps
from .ops.metrics import Metrics, read_metrics
from .periodic.repeat import Repeats
from .producing.enqueueing import Enqueuer, drive_async
from .producing.submit import job_spec
from .seam.scripts import Submitted, scripts_for
from .settings import EngineSettings
from .stream.events import live_groups
from .task import Task
from .transport.connection import connect, server_ms

_LIVE = ("submitted", "scheduled", "blocked", "started", "dlq")
_TERMINAL = sorted(TERMINAL_STATES)
# Most job ids one script call takes (cancel, purge, resubmit).
_CHUNK = 500


class Client:
    """Talk to the engine's Redis: submit jobs and inspect them."""

    def __init__(self, settings: EngineSettings, redis: Redis | None = None) -> None:
        self.settings = settings
        self.redis = (
            redis if redis is not None else connect(settings, timeout_s=settings.client_timeout_s)
        )
        self.scripts = scripts_for(self.redis, settings)
        # Repeatable and cron jobs: add, update, pause, resume, remove, list.
        self.repeats = Repeats(settings, self.redis)
        # The enqueue's steps, shared with the SyncClient (engine/producing/enqueueing.py).
        self._enqueuer = Enqueuer(settings)

    def keys(self, queue: str) -> QueueKeys:
        """Return the keys of `queue`."""
        return queue_keys(self.settings.prefix, queue)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self.redis.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def enqueue(self, task: Task, *args: Any, **kwargs: Any) -> Job:
        """Submit one call of `task`; use `task.using(...)` for per-call options."""
        return (await self.enqueue_many([task.call(*args, **kwargs)]))[0]

    async def enqueue_many(self, jobs: Iterable[Job]) -> list[Job]:
        """Submit jobs in one script call per queue; validate all before writing any.

        Jobs with `depends_on` make the batch a flow (see `enqueue_flow`). Otherwise a job id
        that already exists raises DuplicateJob after the others were written. A deduplicated
        job comes back with the id and state of the job that holds its deduplication id.
        """
        return await self._enqueue(list(jobs), atomic=False)

    async def enqueue_flow(self, jobs: Iterable[Job]) -> list[Job]:
        """Submit a graph of jobs linked by `depends_on`, all or nothing, in one queue.

        Raises ConfigError for a cycle, UnknownParent for a parent that is neither in the
        batch nor in the queue, DuplicateJob for an id that exists; nothing is written then.
        """
        return await self._enqueue(list(jobs), atomic=True)

    async def _enqueue(self, jobs: list[Job], atomic: bool) -> list[Job]:
        if any(job.repeat_every_s is not None for job in jobs):
            if len(jobs) > 1 or jobs[0].parents:
                raise ConfigError("a repeating job (repeat_every_s) is enqueued alone")
            return [await self._repeating(jobs[0])]
        steps = self._enqueuer.enqueue(jobs, atomic)
        done: list[Job] = await drive_async(steps, self.redis, self.scripts.raw)
        return done

    async def _repeating(self, job: Job) -> Job:
        """Add the repeatable a repeating job stands for (named by its id, first run at once or
        after its delay); return the job as its first run (`<id>@<ms>`, scheduled)."""
        every_s, limit = job.repeat_every_s, job.repeat_limit
        assert every_s is not None
        start_s = None
        if job.run_at_ms is not None or job.delay_ms:
            now_ms = await server_ms(self.redis)
            start_s = ((job.run_at_ms or now_ms + (job.delay_ms or 0)) + 0.5) / 1000
        template = dataclasses.replace(
            job, run_at_ms=None, delay_ms=None, repeat_every_s=None, repeat_limit=None
        )
        rep = await self.repeats.add(
            job.id,
            template,
            every_s=every_s,
            start_at=start_s,
            repeat_limit=limit,
            not_before_now=True,
        )
        job.id, job.state, job.repeat = (
            f"{rep.name}@{rep.start_at_ms}",
            JobState.SCHEDULED,
            rep.name,
        )
        return job

    async def _submit(self, queue: str, specs: list[bytes], atomic: bool) -> list[Submitted]:
        steps = self._enqueuer.submit(queue, specs, atomic)
        done: list[Submitted] = await drive_async(steps, self.redis, self.scripts.raw)
        return done

    async def run_repeatable_now(self, queue: str, name: str, suffix: str = "m") -> Job | None:
        """Submit one job of repeatable `name` now (id `name@<server ms><suffix>`), made its
        last run by the same script; None when there is no such repeatable. A scheduled flow
        submits all its jobs (all or nothing) and returns the first."""
        rep = await self.repeats.get(queue, name)
        if rep is None:
            return None
        now_ms = await server_ms(self.redis)
        job, *rest = rep.jobs_for(now_ms, f"{name}@{now_ms}{suffix}")
        limit, keys = self.settings.max_payload_bytes, self.keys(queue)
        for one in (job, *rest):
            check_job_id(one.id)
        fmt = await self.scripts.raw.hash_format()
        specs = [
            job_spec(job, keys, limit, last_of=name, fmt=fmt),
            *(job_spec(j, keys, limit, fmt=fmt) for j in rest),
        ]
        (done, *_) = await self._submit(queue, specs, atomic=bool(rest))
        if done.outcome == Code.DUPLICATE_ID:
            raise DuplicateJob(f"job ids already exist: {job.id}", (job.id,))
        job.id, job.state = done.id, JobState(done.state or JobState.COMPLETED)
        return job

    async def missing(self, jobs: Iterable[tuple[str, str]]) -> set[str]:
        """Return the ids of the (job id, queue) pairs whose job Redis does not hold."""
        pairs = list(jobs)
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id, queue in pairs:
                pipe.exists(self.keys(queue).job(job_id))
            found = await pipe.execute()
        return {job_id for (job_id, _), hit in zip(pairs, found, strict=True) if not hit}

    async def job_fields(
        self, queue: str, ids: Sequence[str], names: Sequence[str]
    ) -> list[dict[str, str]]:
        """Return fields `names` (Job attribute names) of each job of `queue` ({} for one Redis
        does not hold)."""
        stored = both(*names)
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self.keys(queue).job(job_id), stored)
            rows = await pipe.execute()
        return [
            {n: v for n, v in zip(names, either(row), strict=True) if v is not None} for row in rows
        ]

    async def queues(self) -> list[str]:
        """Return the names of every queue a client has submitted to."""
        names: set[str] = await self.redis.smembers(queues_key(self.settings.prefix))  # type: ignore[assignment]
        return sorted(names)

    async def get(self, job_id: str, queue: str | None = None) -> Job:
        """Return the job with this id, from every known queue at once when `queue` is None."""
        names = [queue] if queue else await self.queues()
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(self.keys(name).job(job_id))
            found: list[dict[str, str]] = await pipe.execute()
        for name, fields in zip(names, found, strict=True):
            if fields:
                return Job.from_hash(fields, job_id, name)
        raise JobNotFound(f"no job with id {job_id!r}")

    async def wait(self, job_id: str, timeout_s: float, queue: str | None = None) -> Job:
        """Wait until the job reaches a terminal state; raise JobTimeout after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        pause_s = 0.002
        while True:
            job = await self.get(job_id, queue)
            queue = job.queue
            if job.state in TERMINAL_STATES:
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobTimeout(f"job {job_id} still {job.state} after {timeout_s}s")
            await asyncio.sleep(min(pause_s, left))
            pause_s = min(pause_s * 2, 0.1)

    async def counts(self, queue: str) -> dict[str, int]:
        """Return live counts per state (submitted includes waiting_turn: jobs waiting for their
        concurrency key's turn), DLQ size, and totals of terminal states reached."""
        return (await self.queue_states([queue]))[0][1]

    async def queue_states(self, queues: Sequence[str]) -> list[tuple[bool, dict[str, int]]]:
        """Return each queue's paused flag and its counts (see `counts`), in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for queue in queues:
                keys = self.keys(queue)
                pipe.hget(keys.meta, "paused")
                pipe.zcard(keys.submitted)
                pipe.zcard(keys.scheduled)
                pipe.scard(keys.blocked)
                pipe.zcard(keys.started)
                pipe.zcard(keys.dlq)
                pipe.hmget(keys.stats, ["waiting_turn", "waiting_version", *_TERMINAL])
            replies = await pipe.execute()
        states = []
        each = len(replies) // len(queues) if queues else 0  # replies per queue
        for at in range(0, len(replies), each or 1):
            paused, *sizes, (waiting_turn, waiting_version, *totals) = replies[at : at + each]
            out = dict(zip(_LIVE, sizes, strict=True))
            # Submitted jobs waiting for their concurrency key's turn, or for a worker with their
            # task version (claim-12.lua), are not in the ready ZSET.
            out["waiting_turn"] = int(waiting_turn or 0)
            out["waiting_version"] = int(waiting_version or 0)
            out["submitted"] += out["waiting_turn"] + out["waiting_version"]
            for state, total in zip(_TERMINAL, totals, strict=True):
                out[f"{state}_total"] = int(total or 0)
            states.append((paused == "1", out))
        return states

    async def metrics(self, queues: Iterable[str], group: str = "mirror") -> Metrics:
        """Return the metrics of `queues` (counts, histograms, depths, mirror lag), workers alive.

        `group` is the consumer group whose lag is reported (the Django mirror's by default); the
        lag of every other group read lately (the transition hooks') is in `groups`.
        """
        prefix = self.settings.prefix
        others = [g for g in await live_groups(self.redis, prefix) if g != group]
        return await read_metrics(self.redis, prefix, list(queues), group, others)

    async def cancel(self, job_ids: Iterable[str], queue: str | None = None) -> dict[str, str]:
        """Cancel jobs; return id -> "cancelled", "cancelling" (running), "not_found" or "finished".

        A queued job is cancelled at once. A running one gets a durable mark; its worker stops it
        within about `heartbeat_interval_s` and it ends `cancelled`, never retried.
        """
        ids = list(job_ids)
        by_queue: dict[str, list[str]] = defaultdict(list)
        result: dict[str, str] = {}
        for job_id in ids:
            if queue is not None:
                by_queue[queue].append(job_id)
                continue
            try:
                by_queue[(await self.get(job_id)).queue].append(job_id)
            except JobNotFound:
                result[job_id] = "not_found"
        names = {0: "cancelled", 1: "cancelling", -1: "not_found", -3: "finished"}
        for name, queued in by_queue.items():
            keys = self.keys(name)
            for start in range(0, len(queued), _CHUNK):
                chunk = queued[start : start + _CHUNK]
                codes = await self.scripts.cancel(
                    keys,
                    events_maxlen=self.settings.events_emergency_maxlen,
                    ttl_ms=self.settings.default_result_ttl_s * 1000,
                    job_ids=chunk,
                )
                result.update((i, names[code]) for i, code in zip(chunk, codes, strict=True))
        return result

    async def purge(self, queue: str, job_ids: Iterable[str]) -> int:
        """Delete finished jobs from Redis (live ones are left alone); return how many."""
        ids = list(job_ids)
        purged = 0
        for start in range(0, len(ids), _CHUNK):
            codes = await self.scripts.purge(self.keys(queue), job_ids=ids[start : start + _CHUNK])
            purged += sum(1 for code in codes if code == Code.OK)
        return purged

    async def run_now(self, queue: str, job_ids: Iterable[str]) -> dict[str, str]:
        """Promote scheduled jobs (waiting for their run_at or a retry's backoff) to `submitted`
        now; return id -> "promoted", "not_found" or "not_scheduled"."""
        ids = list(job_ids)
        names = {Code.OK: "promoted", Code.NOT_FOUND: "not_found"}
        names[Code.WRONG_STATE] = "not_scheduled"
        result: dict[str, str] = {}
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            done = await self.scripts.promote(
                self.keys(queue),
                events_maxlen=self.settings.events_emergency_maxlen,
                max_jobs=len(chunk),
                job_ids=chunk,
            )
            result.update((i, names[Code(c)]) for i, c in zip(chunk, done.codes, strict=True))
        return result

    async def scheduled(
        self, queue: str, offset: int = 0, limit: int = 100, retrying: bool | None = None
    ) -> list[Job]:
        """Return scheduled jobs of `queue`, next due first: `limit` after `offset`, counting
        only retries waiting for their backoff (`retrying` True: attempt >= 1) or only jobs
        never run yet (False) when given."""
        keys = self.keys(queue)
        found: list[Job] = []
        skip, start = offset, 0
        while len(found) < limit:
            page: list[str] = await self.redis.zrange(keys.scheduled, start, start + _CHUNK - 1)  # type: ignore[assignment]
            if not page:
                break
            start += len(page)
            for job in await self._jobs(queue, page):
                if retrying is not None and (job.attempt >= 1) != retrying:
                    continue
                if skip:
                    skip -= 1
                elif len(found) < limit:
                    found.append(job)
        return found

    async def clear_state(self, queue: str, state: str, dry_run: bool = False) -> int:
        """Delete `queue`'s finished jobs of `state` from Redis, one script call per SCAN step
        (engine/ops/clearing.py); return how many (with `dry_run`, how many there are)."""
        if dry_run:
            return await clearing.count_state(self, queue, state)
        return await clearing.clear_state(self, queue, state)

    async def pause(self, queue: str) -> None:
        """Pause a queue: no worker claims from it (its jobs stay put) until `resume`."""
        await self.redis.hset(self.keys(queue).meta, "paused", "1")

    async def resume(self, queue: str) -> None:
        """Resume a paused queue and wake idle workers."""
        keys = self.keys(queue)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hdel(keys.meta, "paused")
            pipe.zadd(keys.marker, {"0": 0})
            await pipe.execute()

    async def set_rate_limit(self, queue: str, rate: str | tuple[float, float] | None) -> None:
        """Limit starts from `queue` for all workers ("10/s", "600/m", (10, 1.0)); None lifts it."""
        keys = self.keys(queue)
        if rate is None:
            await self.redis.hdel(keys.meta, "rate_interval_ms", "tat")
        else:
            interval = rate_interval_ms(rate)
            await self.redis.hset(keys.meta, "rate_interval_ms", f"{interval:.3f}")

    async def rate_limit_ms(self, queue: str) -> float | None:
        """Return the interval between starts that `queue`'s rate limit sets, or None."""
        raw = await self.redis.hget(self.keys(queue).meta, "rate_interval_ms")
        return float(raw) if raw else None

    async def concurrency_keys(self, queue: str, limit: int = 100) -> list[dict[str, Any]]:
        """Return the concurrency keys of `queue` with jobs waiting for their turn (at most
        `limit`, most waiting first): key, jobs waiting, jobs running under it (`active`)."""
        keys = self.keys(queue)
        waiting: dict[str, int] = {}
        async for field, count in self.redis.hscan_iter(keys.stats, match="turn|*", count=500):
            name, kind = keys.concurrency_key_of(field.partition("|")[2])
            if kind == "waiting" and int(count) > 0:
                waiting[name] = int(count)
        names = sorted(waiting, key=lambda n: (-waiting[n], n))[:limit]
        async with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.scard(keys.concurrency(name)[0])
            active = await pipe.execute()
        return [
            {"key": n, "waiting": waiting[n], "active": int(a)}
            for n, a in zip(names, active, strict=True)
        ]

    async def is_paused(self, queue: str) -> bool:
        """Tell whether a queue is paused."""
        return await self.redis.hget(self.keys(queue).meta, "paused") == "1"

    async def workers(self) -> list[dict[str, Any]]:
        """Return the live workers: id, host, pid, queues, concurrency, current jobs, heartbeat,
        state, role, resident memory (`rss_mib`), `outcomes` per queue ({"completed", "failed"})
        and task@`versions`."""
        prefix = self.settings.prefix
        ids: list[str] = await self.redis.zrange(workers_key(prefix), 0, -1)  # type: ignore[assignment]
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in ids:
                pipe.hgetall(worker_key(prefix, worker_id))
            rows = await pipe.execute()
        out = []
        for row in rows:
            if row:
                info: dict[str, Any] = dict(row)
                info["current_jobs"] = serializer.loads(row.get("current_jobs", "[]"))
                for name in ("pid", "concurrency", "started_at_ms", "heartbeat_at_ms"):
                    info[name] = int(row.get(name, 0))
                # Left out by workers older than these fields: none known.
                info["rss_mib"] = float(row.get("rss_mib") or 0)
                info["outcomes"] = serializer.loads(row.get("outcomes") or "{}")
                info["versions"] = serializer.loads(row.get("versions") or "[]")
                out.append(info)
        return out

    async def control(
        self,
        what: str,
        worker: str | None = None,
        host: str | None = None,
        queue: str | None = None,
    ) -> list[str]:
        """Tell one worker, every worker of a host or of a queue to quiet (stop claiming, finish
        what runs), resume or stop (gracefully); return the ids of the workers told.

        Claims stop on the server at once; the worker obeys within heartbeat_interval_s.
        """
        chosen = control.select(await self.workers(), worker=worker, host=host, queue=queue)
        return await control.send(self.redis, self.settings.prefix, control.order(what), chosen)

    async def dlq(
        self,
        queue: str,
        offset: int = 0,
        limit: int = 100,
        task: str | None = None,
        version: int | None = None,
    ) -> list[Job]:
        """Return jobs in the DLQ of `queue`, oldest first: `limit` of them after `offset`,
        counting only those of `task` (and its `version`) when given."""
        keys = self.keys(queue)
        if task is None and version is None:
            ids: list[str] = await self.redis.zrange(keys.dlq, offset, offset + limit - 1)  # type: ignore[assignment]
            return await self._jobs(queue, ids)
        found: list[Job] = []
        skip, start = offset, 0
        while len(found) < limit:  # a page of the DLQ at a time, its matches kept
            page: list[str] = await self.redis.zrange(keys.dlq, start, start + _CHUNK - 1)  # type: ignore[assignment]
            if not page:
                break
            start += len(page)
            for job in await self._jobs(queue, page):
                if (task is None or job.task == task) and (
                    version is None or job.version == version
                ):
                    if skip:
                        skip -= 1
                    elif len(found) < limit:
                        found.append(job)
        return found

    async def get_deduplication_job_id(self, queue: str, dedup_id: str) -> str | None:
        """Return the id of the job that holds deduplication id `dedup_id`, or None."""
        held = await self.redis.get(self.keys(queue).dedup(dedup_id))
        return None if held is None else str(held)

    async def remove_deduplication_key(self, queue: str, dedup_id: str) -> bool:
        """Free deduplication id `dedup_id` (the next job with it is submitted, whatever holds
        it now); return whether it was held."""
        return bool(await self.redis.delete(self.keys(queue).dedup(dedup_id)))

    async def ping(self) -> None:
        """Check that Redis answers (RedisUnavailable when it does not)."""
        await self.redis.ping()

    async def scan_job_ids(
        self, queue: str, cursor: int = 0, count: int = 1000
    ) -> tuple[int, list[str]]:
        """Return the next SCAN cursor over `queue`'s job hashes and the ids of one step (0:
        done); on a cluster, SCAN the one master holding the queue's slot."""
        qkeys = self.keys(queue)
        prefix, pattern = qkeys.job_prefix, qkeys.job_pattern
        if isinstance(self.redis, RedisCluster):  # the queue's slot lives on one master
            await self.redis.initialize()
            node = self.redis.get_node_from_key(prefix)
            reply = await self.redis.scan(cursor, match=pattern, count=count, target_nodes=node)
            # redis-py answers a SCAN on chosen nodes with the cursor per node: ({node: n}, keys).
            at, keys = reply
            cursor = next(iter(at.values())) if isinstance(at, dict) else at
        else:
            cursor, keys = await self.redis.scan(cursor, match=pattern, count=count)
        return int(cursor), [str(key)[len(prefix) :] for key in keys]

    async def history_gaps(self, queue: str) -> dict[str, int]:
        """Return the queue's history gaps, ever: event entries trimmed before the mirror read
        them, jobs of those rebuilt from their hashes, and jobs that could not be (trim-3.lua)."""
        values = await self.redis.hmget(self.keys(queue).stats, list(gaps.GAP_FIELDS))
        stats = dict(zip(gaps.GAP_FIELDS, values, strict=True))
        return {
            "entries": int(stats["gap_entries"] or 0),
            "rebuilt": int(stats["gap_rebuilt"] or 0),
            "lost": gaps.lost(stats),
        }

    async def mark_missed(self, queue: str, job_ids: Sequence[str]) -> None:
        """Put jobs in `queue`'s missed SET: the history rebuilds their rows from their hashes."""
        if job_ids:
            await self.redis.sadd(self.keys(queue).missed, *job_ids)

    async def in_dlq(self, queue: str, job_ids: Iterable[str]) -> set[str]:
        """Return the ids among `job_ids` that the dead-letter queue of `queue` holds."""
        ids, key = list(job_ids), self.keys(queue).dlq
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.zscore(key, job_id)
            scores = await pipe.execute()
        return {i for i, score in zip(ids, scores, strict=True) if score is not None}

    async def waiting(self, queue: str, limit: int = 1000) -> list[Job]:
        """Return jobs of `queue` not started yet: submitted (next first), then scheduled."""
        keys = self.keys(queue)
        ready: list[str] = await self.redis.zrange(keys.submitted, 0, limit - 1)  # type: ignore[assignment]
        later: list[str] = await self.redis.zrange(keys.scheduled, 0, limit - 1)  # type: ignore[assignment]
        return (await self._jobs(queue, [*ready, *later]))[:limit]

    async def _jobs(self, queue: str, ids: list[str]) -> list[Job]:
        keys = self.keys(queue)
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(keys.job(job_id))
            rows = await pipe.execute()
        return [Job.from_hash(row, i, queue) for i, row in zip(ids, rows, strict=True) if row]

    async def resubmit(self, queue: str, job_ids: Iterable[str]) -> int:
        """Resubmit finished jobs by id as new attempt series; return how many were resubmitted."""
        keys = self.keys(queue)
        ids = list(job_ids)
        done = 0
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            codes = await self.scripts.resubmit(
                keys,
                events_maxlen=self.settings.events_emergency_maxlen,
                ttl_ms=self.settings.default_result_ttl_s * 1000,
                job_ids=chunk,
            )
            done += sum(1 for code in codes if code == Code.OK)
        return done

    async def resubmit_dlq(self, queue: str, task: str | None = None) -> int:
        """Resubmit every DLQ job of `queue`, or only those of `task`; return the count."""
        keys = self.keys(queue)
        total = 0
        cursor = 0
        while True:
            cursor, page = await self.redis.zscan(keys.dlq, cursor, count=_CHUNK)
            ids: list[str] = [str(job_id) for job_id, _ in page]
            if task is not None and ids:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for job_id in ids:
                        pipe.hmget(keys.job(job_id), both("task"))
                    names = [either(row)[0] for row in await pipe.execute()]
                ids = [i for i, name in zip(ids, names, strict=True) if name == task]
            total += await self.resubmit(queue, ids)
            if cursor == 0:
                return total
