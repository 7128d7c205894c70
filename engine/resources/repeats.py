"""Repeatable jobs: every N seconds or a cron expression in a time zone, stored in Redis.

Definitions live in the queue's `repeats` HASH, the next tick of each active one in its
`repeat_due` ZSET. Schedulers fire due ticks through submit-13.lua, which writes a tick's job
only while that tick is still due, so any number of schedulers give one job per tick. Ticks
missed while no scheduler ran are not replayed: the late tick fires once, then the next future one.

A repeatable's `origin` says who made it: "runtime" (`Repeats.add`) or "settings" (a declared
schedule, see engine/periodic/declared.py). A declared one changed at run time (add, pause,
resume) is marked `overridden`; syncing the declaration keeps it as changed.
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime

from redis.asyncio import Redis
from redis.exceptions import WatchError

from ..arguments import check_job_arguments
from ..errors import Code, ConfigError, DuplicateJob
from ..fields import both, either
from ..job import Job, JobState
from ..keys import QueueKeys, check_job_id, queue_keys, queues_key
from ..producing.enqueueing import Enqueuer
from ..producing.repeatable import FIRED, Repeatable, epoch_ms, flow_template, parse, template
from ..producing.submit import default_queue_timeout, flow_order, job_spec
from ..seam.scripts import Scripts
from ..seam.steps import drive_async
from ..settings import EngineSettings
from ..transport.connection import server_ms


class Repeats:
    """Add, update, pause, resume, remove and list the repeatables of any queue."""

    def __init__(
        self, settings: EngineSettings, redis: Redis, scripts: Scripts, enqueuer: Enqueuer
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.scripts = scripts
        self.enqueuer = enqueuer

    async def first_run(self, job: Job) -> Job:
        """Add the repeatable a repeating job stands for (named by its id, first run at once or
        after its delay); return the job as its first run (`<id>@<ms>`, scheduled)."""
        every_s, limit = job.repeat_every_s, job.repeat_limit
        assert every_s is not None
        start_s = None
        if job.run_at_ms is not None or job.delay_ms:
            now_ms = await server_ms(self.redis)
            start_s = ((job.run_at_ms or now_ms + (job.delay_ms or 0)) + 0.5) / 1000
        plain = dataclasses.replace(
            job, run_at_ms=None, delay_ms=None, repeat_every_s=None, repeat_limit=None
        )
        rep = await self.add(
            job.id,
            plain,
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

    async def run_now(self, queue: str, name: str, suffix: str = "m") -> Job | None:
        """Submit one job of repeatable `name` now (id `name@<server ms><suffix>`), made its
        last run by the same script; None when there is no such repeatable. A scheduled flow
        submits all its jobs (all or nothing) and returns the first."""
        rep = await self.get(queue, name)
        if rep is None:
            return None
        now_ms = await server_ms(self.redis)
        job, *rest = rep.jobs_for(now_ms, f"{name}@{now_ms}{suffix}")
        limit, keys = self.settings.max_payload_bytes, queue_keys(self.settings.prefix, queue)
        for one in (job, *rest):
            check_job_id(one.id)
        fmt = await self.scripts.raw.hash_format()
        specs = [
            job_spec(job, keys, limit, last_of=name, fmt=fmt),
            *(job_spec(j, keys, limit, fmt=fmt) for j in rest),
        ]
        steps = self.enqueuer.submit(queue, specs, bool(rest))
        (done, *_) = await drive_async(steps, self.redis, self.scripts.raw)
        if done.outcome == Code.DUPLICATE_ID:
            raise DuplicateJob(f"job ids already exist: {job.id}", (job.id,))
        job.id, job.state = done.id, JobState(done.state or JobState.COMPLETED)
        return job

    async def add(
        self,
        name: str,
        job: Job | Sequence[Job],
        *,
        every_s: float | None = None,
        cron: str | None = None,
        tz: str = "UTC",
        skip_if_running: bool = False,
        start_at: datetime | float | None = None,
        end_at: datetime | float | None = None,
        paused: bool = False,
        tolerance_s: float | None = None,
        repeat_limit: int | None = None,
        not_before_now: bool = False,
    ) -> Repeatable:
        """Add or replace repeatable `name`: submit a copy of `job` (a `task.call(...)`) each tick,
        or of a whole flow (a list of calls linked by `depends_on`, in one queue).

        Without `start_at`, an `every_s` repeatable ticks first `every_s` from now. With
        `paused`, it is stored paused (no tick until `resume`). With `repeat_limit`, it ends
        after that many ticks fired (counted afresh from this call). With `not_before_now`, the
        first tick is `start_at` or now, whichever is later (a repeating job's first run).
        """
        limit = self.settings.max_payload_bytes
        for one in [job] if isinstance(job, Job) else job:
            if self.settings.check_argument_types:
                check_job_arguments(one)
            default_queue_timeout(one, self.settings)
        flow = None if isinstance(job, Job) else flow_template(name, job, limit)
        first = job if isinstance(job, Job) else flow_order(list(job))[0]
        now = await server_ms(self.redis, QueueKeys(self.settings.prefix, first.queue).repeat_due)
        start = epoch_ms(start_at)
        if not_before_now:
            start = max(start or now, now)
        rep = Repeatable(
            name=name,
            queue=first.queue,
            job=flow[0]["job"] if flow else template(first, limit),
            repeat_limit=repeat_limit,
            flow=flow,
            every_s=every_s,
            cron=cron,
            tz=tz,
            skip_if_running=skip_if_running,
            start_at_ms=now if start is None else start,
            end_at_ms=epoch_ms(end_at),
            paused=paused,
            tolerance_s=tolerance_s,
        )
        if start is None and rep.every_s is not None:
            rep = dataclasses.replace(rep, start_at_ms=now + round(rep.every_s * 1000))
        rep.check_fires(now, self.settings.min_repeat_interval_s)  # paused or not
        await self._check_name_free(name, rep.queue)
        return await self._change(rep.queue, name, lambda _: rep, now, replace=True)

    async def _check_name_free(self, name: str, queue: str) -> None:
        """Raise ConfigError if another queue has a repeatable `name`: a tick's job id is the
        name and its time, so two queues sharing a name would share ids."""
        names: set[str] = await self.redis.smembers(queues_key(self.settings.prefix))  # type: ignore[assignment]
        others = sorted(names - {queue})
        async with self.redis.pipeline(transaction=False) as pipe:
            for other in others:
                pipe.hexists(QueueKeys(self.settings.prefix, other).repeats, name)
            found = await pipe.execute()
        if any(found):
            raise ConfigError(f"a repeatable named {name!r} exists in another queue")

    async def _change(
        self,
        queue: str,
        name: str,
        change: Callable[[Repeatable | None], Repeatable],
        now_ms: int,
        replace: bool = False,
    ) -> Repeatable:
        """Store `change(stored one or None)` as repeatable `name`; return what was stored.

        Atomic against other writers (WATCH): a sync of declared schedules in between makes it
        start again. A declared repeatable changed so becomes overridden. With `replace`, an
        unreadable stored definition counts as none.
        """
        keys = QueueKeys(self.settings.prefix, queue)
        async with self.redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(keys.repeats)
                    raw = await pipe.hget(keys.repeats, name)
                    fired = int(await pipe.hget(keys.repeat_last, FIRED + name) or 0)
                    old = None if raw is None else parse(raw, lenient=replace)
                    rep = change(old)
                    if not rep.paused:  # a paused one is checked when it is resumed
                        rep.check_fires(now_ms, self.settings.min_repeat_interval_s)
                    if old is not None and old.origin == "settings":
                        rep = dataclasses.replace(rep, origin="settings", overridden=True)
                    done = rep.repeat_limit is not None and fired >= rep.repeat_limit
                    due = (
                        None if rep.paused or (done and not replace) else rep.next_after(now_ms - 1)
                    )
                    pipe.multi()  # type: ignore[no-untyped-call]
                    if replace:  # a new definition counts its ticks afresh
                        pipe.hdel(keys.repeat_last, FIRED + name)
                    pipe.hset(keys.repeats, name, rep.to_json())
                    if due is None:
                        pipe.zrem(keys.repeat_due, name)
                    else:
                        pipe.zadd(keys.repeat_due, {name: due})
                    await pipe.execute()
                    break
                except WatchError:
                    continue
        await self.redis.sadd(queues_key(self.settings.prefix), queue)
        return rep

    async def get(self, queue: str, name: str) -> Repeatable | None:
        """Return repeatable `name` of `queue`, or None."""
        raw = await self.redis.hget(QueueKeys(self.settings.prefix, queue).repeats, name)
        return None if raw is None else Repeatable.from_json(raw)

    async def list(self, queue: str) -> list[tuple[Repeatable, int | None]]:
        """Return every repeatable of `queue` with its next tick in ms (None when paused)."""
        keys = QueueKeys(self.settings.prefix, queue)
        raw: dict[str, str] = await self.redis.hgetall(keys.repeats)  # type: ignore[assignment]
        pairs: list[tuple[str, float]] = await self.redis.zrange(  # type: ignore[assignment]
            keys.repeat_due, 0, -1, withscores=True
        )
        due = dict(pairs)
        return [
            (Repeatable.from_json(v), int(due[k]) if k in due else None)
            for k, v in sorted(raw.items())
        ]

    async def last_runs(
        self, queue: str, names: Sequence[str]
    ) -> builtins.list[tuple[str | None, str | None]]:
        """Return, per repeatable of `names`, its last run's job id and that job's state (None
        where there was no run, or Redis no longer holds the job)."""
        if not names:
            return []
        keys = QueueKeys(self.settings.prefix, queue)
        ids: builtins.list[str | None] = await self.redis.hmget(  # type: ignore[assignment]
            keys.repeat_last, builtins.list(names)
        )
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(keys.job(job_id or "-"), both("state"))
            states = [either(row)[0] for row in await pipe.execute()]
        return [(i, st if i else None) for i, st in zip(ids, states, strict=True)]

    async def fired(self, queue: str, names: Sequence[str]) -> builtins.list[int]:
        """Return, per repeatable of `names`, how many ticks it fired (since it was added)."""
        if not names:
            return []
        keys = QueueKeys(self.settings.prefix, queue)
        counts: builtins.list[str | None] = await self.redis.hmget(  # type: ignore[assignment]
            keys.repeat_last, [FIRED + n for n in names]
        )
        return [int(c or 0) for c in counts]

    async def _set_paused(self, queue: str, name: str, paused: bool) -> None:
        def change(rep: Repeatable | None) -> Repeatable:
            if rep is None:
                raise ConfigError(f"no repeatable named {name!r} in queue {queue!r}")
            return dataclasses.replace(rep, paused=paused)

        now_ms = await server_ms(self.redis, QueueKeys(self.settings.prefix, queue).repeat_due)
        await self._change(queue, name, change, now_ms)

    async def pause(self, queue: str, name: str) -> None:
        """Stop submitting ticks of `name` until `resume`."""
        await self._set_paused(queue, name, True)

    async def resume(self, queue: str, name: str) -> None:
        """Submit ticks of `name` again, from the next one after now."""
        await self._set_paused(queue, name, False)

    async def remove(self, queue: str, name: str) -> bool:
        """Delete repeatable `name`; return whether it existed. Jobs already submitted stay."""
        keys = QueueKeys(self.settings.prefix, queue)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hdel(keys.repeats, name)
            pipe.zrem(keys.repeat_due, name)
            pipe.hdel(keys.repeat_last, name, FIRED + name)
            existed, _, _ = await pipe.execute()
        return bool(existed)
