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
import itertools
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter
from redis.asyncio import Redis
from redis.exceptions import WatchError

from .. import serializer
from ..errors import ConfigError, EngineError
from ..fields import F, both, either
from ..job import Job
from ..keys import QueueKeys, queues_key
from ..producing.submit import default_queue_timeout, flow_order
from ..settings import EngineSettings
from ..task import epoch_s, json_args
from ..transport.connection import server_ms

# Its ticks' job ids are the name, "@" and a 14-digit time: they must follow the job-id rule.
_NAME = re.compile(r"^[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,112}$")
# The field of `repeat_last` counting a repeatable's fired ticks (repeat_ticks.lua spells it too).
FIRED = "fired|"
# Hash fields of a job template that each tick sets afresh.
_PER_TICK = (F.id, F.state, F.sent_at_ms, F.repeat)

# Who made a repeatable: `Repeats.add` at run time, or a sync of declared schedules.
Origin = Literal["runtime", "settings"]
ORIGINS: tuple[Origin, ...] = ("runtime", "settings")


@dataclass(frozen=True, slots=True)
class Repeatable:
    """A job template and when to submit it: `every_s` seconds from `start_at_ms`, or `cron`."""

    name: str
    queue: str
    job: dict[str, str]
    every_s: float | None = None
    cron: str | None = None
    tz: str = "UTC"
    skip_if_running: bool = False
    start_at_ms: int = 0
    end_at_ms: int | None = None
    paused: bool = False
    origin: Origin = "runtime"
    # A declared repeatable (origin "settings") changed at run time: syncs keep it as it is.
    overridden: bool = False
    # How late a tick may fire or its job start before its health says so (None: the default;
    # engine/periodic/schedule_health.py).
    tolerance_s: float | None = None
    # Ticks it fires, then it ends (None: no end but end_at).
    repeat_limit: int | None = None
    # A whole flow each tick (a scheduled flow): one template per job, parents first, each
    # {"job": hash fields, "parents": [indexes of earlier jobs]}; `job` is the first one's.
    flow: list[dict[str, Any]] | None = None
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(
                f"repeatable names are 1-113 of [A-Za-z0-9._:-], not starting with '.'; "
                f"got {self.name!r}"
            )
        if (self.every_s is None) == (self.cron is None):
            raise ConfigError("a repeatable needs exactly one of every_s and cron")
        if self.every_s is not None and not (
            isinstance(self.every_s, int | float)
            and math.isfinite(self.every_s)
            and self.every_s > 0
        ):
            raise ConfigError(f"every_s must be a positive number of seconds, got {self.every_s!r}")
        if self.cron is not None and not (
            isinstance(self.cron, str) and croniter.is_valid(self.cron)
        ):
            raise ConfigError(f"invalid cron expression: {self.cron!r}")
        try:
            object.__setattr__(self, "zone", ZoneInfo(self.tz))
        except (ZoneInfoNotFoundError, ValueError, TypeError):
            raise ConfigError(f"unknown time zone: {self.tz!r}") from None
        if self.end_at_ms is not None and self.end_at_ms < self.start_at_ms:
            raise ConfigError("end_at must not be before start_at")
        if self.tolerance_s is not None and not (
            isinstance(self.tolerance_s, int | float)
            and not isinstance(self.tolerance_s, bool)
            and math.isfinite(self.tolerance_s)
            and self.tolerance_s > 0
        ):
            raise ConfigError(f"tolerance_s must be a positive number, got {self.tolerance_s!r}")
        if self.origin not in ORIGINS:
            raise ConfigError(f"origin must be one of {ORIGINS}, got {self.origin!r}")
        if self.repeat_limit is not None and (
            isinstance(self.repeat_limit, bool)
            or not isinstance(self.repeat_limit, int)
            or self.repeat_limit < 1
        ):
            raise ConfigError(
                f"repeat_limit must be a whole number >= 1, got {self.repeat_limit!r}"
            )
        if self.flow is not None:
            _check_flow(self.name, self.flow)

    def next_after(self, after_ms: int) -> int | None:
        """Return the first tick strictly after `after_ms`, or None when none is left."""
        if self.every_s is not None:
            every_ms = self.every_s * 1000
            k = (
                0
                if after_ms < self.start_at_ms
                else math.floor((after_ms - self.start_at_ms) / every_ms) + 1
            )
            tick = round(self.start_at_ms + k * every_ms)
        else:
            base = max(after_ms, self.start_at_ms - 1)
            start = datetime.fromtimestamp(base / 1000, UTC).astimezone(self.zone)
            times = croniter(str(self.cron), start)
            nxt: datetime = times.get_next(datetime)
            # As cron does: when clocks go back, a job at a fixed hour runs in the first pass
            # of the repeated hour only; one with a wildcard hour runs in both.
            while "*" not in str(self.cron).split()[1] and _second_pass(nxt):
                nxt = times.get_next(datetime)
            tick = int(nxt.timestamp() * 1000)
        if self.end_at_ms is not None and tick > self.end_at_ms:
            return None
        return tick

    def check_fires(self, now_ms: int, min_interval_s: float) -> None:
        """Raise ConfigError unless this repeatable can fire and submits at most one job per
        `min_interval_s`: a tick of one job `min_interval_s` or more apart, a tick of a flow of
        N jobs N times that (a cron is sampled over its next few ticks)."""
        size = len(self.flow) if self.flow else 1
        least_s = min_interval_s * size
        per = f" for a flow of {size} jobs" if size > 1 else ""
        if self.every_s is not None:
            if self.every_s < least_s:
                raise ConfigError(
                    f"every_s must be at least {least_s:g} s{per} (min_repeat_interval_s "
                    f"{min_interval_s:g} s a job), got {self.every_s:g}"
                )
            return
        ticks: list[int] = []
        try:
            after = max(now_ms, self.start_at_ms)
            while len(ticks) < 5 and (tick := self.next_after(after)) is not None:
                ticks.append(after := tick)
        except (CroniterBadDateError, OverflowError, ValueError):
            raise ConfigError(f"cron expression {self.cron!r} never fires") from None
        gaps = [b - a for a, b in itertools.pairwise(ticks)]
        if gaps and min(gaps) < least_s * 1000:
            raise ConfigError(
                f"cron expression {self.cron!r} fires {min(gaps) / 1000:g} s apart; the least "
                f"interval is {least_s:g} s{per} (min_repeat_interval_s {min_interval_s:g} s a "
                "job)"
            )

    def job_for(self, due_ms: int) -> Job:
        """Return the job of the tick due at `due_ms` (its id names the repeatable and the tick)."""
        fields = {**self.job, F.id: f"{self.name}@{due_ms}", F.repeat: self.name}
        job = Job.from_hash(fields)
        job.sent_at_ms = int(time.time() * 1000)
        return job

    def jobs_for(self, due_ms: int, first_id: str | None = None) -> list[Job]:
        """Return the jobs of one tick, parents first: the job, or every job of the flow (the
        first has the tick's id, which is also the flow's id; the others add `.<index>`)."""
        root = first_id or f"{self.name}@{due_ms}"
        if self.flow is None:
            job = self.job_for(due_ms)
            job.id = root
            return [job]
        ids = [root if i == 0 else f"{root}.{i}" for i in range(len(self.flow))]
        jobs = []
        for i, member in enumerate(self.flow):
            job = Job.from_hash({**member["job"], F.id: ids[i], F.repeat: self.name})
            job.parents = [ids[p] for p in member["parents"]]
            job.flow_id = root
            job.sent_at_ms = int(time.time() * 1000)
            jobs.append(job)
        return jobs

    def to_json(self) -> bytes:
        """Return the stored definition."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        return serializer.dumps(data)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Repeatable:
        """Build from a stored definition."""
        data: dict[str, Any] = serializer.loads(raw)
        return cls(**data)


def template(job: Job, limit_bytes: int) -> dict[str, str]:
    """Return the hash fields each tick's job copies from `job` (checks its payload)."""
    if job.parents:
        raise ConfigError("a repeatable job cannot depend on other jobs (depends_on)")
    json_args(job, limit_bytes)
    fields = job.to_hash()
    for name in _PER_TICK:
        fields.pop(name, None)
    return fields


def flow_template(name: str, jobs: Sequence[Job], limit_bytes: int) -> list[dict[str, Any]]:
    """Return the templates of a flow schedule's jobs (parents first); ConfigError for a
    parent outside the flow, a cycle, or more than one queue."""
    jobs = flow_order(list(jobs))
    index = {job.id: i for i, job in enumerate(jobs)}
    out: list[dict[str, Any]] = []
    for job in jobs:
        outside = [p for p in job.parents if p not in index]
        if outside:
            raise ConfigError(
                f"a scheduled flow's jobs depend only on jobs of the flow, not {outside[0]!r}"
            )
        bare = dataclasses.replace(job, parents=[], flow_id=None)
        out.append({"job": template(bare, limit_bytes), "parents": [index[p] for p in job.parents]})
    if len({job.queue for job in jobs}) > 1:
        raise ConfigError("a flow stays in one queue; give every job the same queue")
    _check_flow(name, out)
    return out


def _check_flow(name: str, flow: list[dict[str, Any]]) -> None:
    if not isinstance(flow, list) or not flow:
        raise ConfigError("a scheduled flow needs at least one job")
    # The ids `name@<14 digits>.<index>` must stay within a job id's 128 characters.
    if len(name) + 16 + len(str(len(flow))) > 128:
        raise ConfigError(f"the name of a scheduled flow of {len(flow)} jobs is too long: {name!r}")
    for i, member in enumerate(flow):
        parents = member.get("parents") if isinstance(member, dict) else None
        if not isinstance(member.get("job"), dict) or not isinstance(parents, list):
            raise ConfigError(f"flow job {i} must be {{job, parents}}")
        if any(not isinstance(p, int) or not 0 <= p < i for p in parents):
            raise ConfigError(f"flow job {i} must depend on earlier jobs only")


def _second_pass(when: datetime) -> bool:
    """Tell whether `when` is the second occurrence of its wall time (clocks went back)."""
    wall = when.replace(tzinfo=None)
    first = wall.replace(tzinfo=when.tzinfo, fold=0).utcoffset()
    second = wall.replace(tzinfo=when.tzinfo, fold=1).utcoffset()
    return first != second and when.utcoffset() == second


def _read(raw: str | bytes, lenient: bool) -> Repeatable | None:
    """Return a stored definition; with `lenient`, None for one that cannot be read."""
    try:
        return Repeatable.from_json(raw)
    except (EngineError, TypeError, ValueError):
        if lenient:
            return None
        raise


def _epoch_ms(value: datetime | float | None) -> int | None:
    if value is None:
        return None
    return int((epoch_s(value) if isinstance(value, datetime) else value) * 1000)


class Repeats:
    """Add, update, pause, resume, remove and list the repeatables of any queue."""

    def __init__(self, settings: EngineSettings, redis: Redis) -> None:
        self.settings = settings
        self.redis = redis

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
            default_queue_timeout(one, self.settings)
        flow = None if isinstance(job, Job) else flow_template(name, job, limit)
        first = job if isinstance(job, Job) else flow_order(list(job))[0]
        now = await server_ms(self.redis, QueueKeys(self.settings.prefix, first.queue).repeat_due)
        start = _epoch_ms(start_at)
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
            end_at_ms=_epoch_ms(end_at),
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
                    old = None if raw is None else _read(raw, lenient=replace)
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
