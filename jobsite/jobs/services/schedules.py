"""Schedules (the engine's repeatables) through the engine: services.py's twins for schedules.

A schedule is named by its queue and name. Its last run is the job id Redis keeps for it
(`repeat_last`: the last tick, or the last run-now job), with that job's state from Redis, else
from the history; when Redis has no id (it was emptied), the history's newest job whose id
starts with `name@` (a range on the primary key).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import sync_to_async

from engine import Client, Job, Repeatable
from jobsite.jobs.models import JobRecord
from jobsite.jobs.services.engineloop import twins

log = logging.getLogger("jobsite.schedules")
# How many fire times a listing shows.
NEXT_RUNS = 5
# The last millisecond a datetime holds (9999-12-31T23:59:59.999Z): later times are not shown.
MAX_MS = 253_402_300_799_999
# Ends the id of a job that "run now" submitted: `name@<ms>m`, distinct from ticks (`name@<ms>`)
# and still within the 128 characters of a job id (names are at most 113).
MANUAL = "m"


@dataclass(frozen=True, slots=True)
class LastRun:
    """The newest job a schedule submitted, as far as Redis or the history knows it."""

    id: str
    state: str | None
    at_ms: int
    manual: bool


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A schedule, its next fire times (none while paused) and its last run."""

    rep: Repeatable
    next_runs_ms: list[int]
    last_run: LastRun | None
    # Ticks fired since it was stored (repeat_limit counts these).
    fired: int = 0


def next_runs(rep: Repeatable, next_ms: int | None, count: int = NEXT_RUNS) -> list[int]:
    """Return the next `count` fire times from the stored next tick (none when paused)."""
    out: list[int] = []
    tick = None if rep.paused else next_ms
    while tick is not None and tick <= MAX_MS and len(out) < count:
        out.append(tick)
        tick = rep.next_after(tick)
    return out


def remaining(rep: Repeatable, fired: int) -> int | None:
    """Return the ticks a schedule with a repeat_limit has left (None: no limit)."""
    return None if rep.repeat_limit is None else max(0, rep.repeat_limit - fired)


def _tick_ms(job_id: str) -> tuple[int, bool] | None:
    """Return (ms, manual) from a schedule's job id `name@<ms>[m]`, or None for another id."""
    stamp = job_id.rpartition("@")[2]
    manual = stamp.endswith(MANUAL)
    digits = stamp.removesuffix(MANUAL)
    if not digits.isdigit() or int(digits) > MAX_MS:
        return None
    return int(digits), manual


def _last_run(job_id: str, state: str | None) -> LastRun | None:
    parsed = _tick_ms(job_id)
    return None if parsed is None else LastRun(job_id, state, parsed[0], parsed[1])


def _from_history(queue: str, name: str) -> LastRun | None:
    """Return the newest job of schedule `name` the history holds (a primary-key range)."""
    prefix = f"{name}@"
    row = (
        JobRecord.objects.filter(queue=queue, id__gt=prefix, id__lt=f"{name}A")
        .filter(id__startswith=prefix)
        .order_by("-id")
        .values("id", "state")
        .first()
    )
    return None if row is None else _last_run(row["id"], row["state"])


@dataclass(frozen=True, slots=True)
class _InRedis:
    """A schedule as Redis holds it: its repeatable, next tick, last job id and that job's state."""

    queue: str
    rep: Repeatable
    next_ms: int | None
    last_id: str | None
    last_state: str | None
    fired: int


async def _in_redis(client: Client, queues: Iterable[str]) -> list[_InRedis]:
    """Return the schedules of `queues` as Redis holds them, by queue then name."""
    out: list[_InRedis] = []
    for queue in queues:
        listed = await client.repeats.list(queue)
        names = [rep.name for rep, _ in listed]
        last = await client.repeats.last_runs(queue, names)
        fired = await client.repeats.fired(queue, names)
        ids = [job_id for job_id, _ in last]
        states = [state for _, state in last]
        rows = zip(listed, ids, states, fired, strict=True)
        out += [_InRedis(queue, rep, due, i, st, n) for (rep, due), i, st, n in rows]
    return out


def _with_history(found: list[_InRedis]) -> list[ScheduleState]:
    """Complete each schedule's last run from the history where Redis forgot it (the ORM part,
    run in the caller's thread, not on the engine loop)."""
    gone = [f.last_id for f in found if f.last_id is not None and f.last_state is None]
    kept = dict(JobRecord.objects.filter(id__in=gone).values_list("id", "state")) if gone else {}
    out = []
    for f in found:
        if f.last_id is None:
            last = _from_history(f.queue, f.rep.name)
        else:
            last = _last_run(f.last_id, f.last_state or kept.get(f.last_id))
        runs = next_runs(f.rep, f.next_ms, min(NEXT_RUNS, remaining(f.rep, f.fired) or NEXT_RUNS))
        out.append(
            ScheduleState(f.rep, runs if remaining(f.rep, f.fired) != 0 else [], last, f.fired)
        )
    return out


def schedules(queues: Iterable[str]) -> list[ScheduleState]:
    """Return the schedules of `queues`, by queue then name."""
    return _with_history(in_redis(list(queues)))


async def aschedules(queues: Iterable[str]) -> list[ScheduleState]:
    """Async twin of `schedules`."""
    return await sync_to_async(_with_history)(await ain_redis(list(queues)))


def schedule(queue: str, name: str) -> ScheduleState | None:
    """Return schedule `name` of `queue`, or None."""
    return next((s for s in schedules([queue]) if s.rep.name == name), None)


async def aschedule(queue: str, name: str) -> ScheduleState | None:
    """Async twin of `schedule`."""
    return next((s for s in await aschedules([queue]) if s.rep.name == name), None)


async def _save_schedule(
    client: Client, /, name: str, job: Job | list[Job], *, exists: bool | None, **timing: Any
) -> Repeatable | None:
    """Store schedule `name` submitting copies of `job` (or of a flow: a list of jobs, parents
    first), timed by `timing` (Repeats.add).

    With `exists` True (edit) or False (create), store only when the schedule does (or does
    not) exist yet; return None when that does not hold.
    """
    queue = job.queue if isinstance(job, Job) else job[0].queue
    if exists is not None and (await client.repeats.get(queue, name) is None) == exists:
        return None
    return await client.repeats.add(name, job, **timing)


async def _set_schedule_paused(client: Client, queue: str, name: str, paused: bool) -> bool:
    """Pause or resume schedule `name`; return False when there is none."""
    if await client.repeats.get(queue, name) is None:
        return False
    await (client.repeats.pause if paused else client.repeats.resume)(queue, name)
    return True


async def _run_schedule(client: Client, queue: str, name: str) -> Job | None:
    """Submit one job of schedule `name` now (id `name@<ms>m`); None when there is none.

    It becomes the schedule's last run in the same engine call (one script), so
    `skip_if_running` ticks wait for it too.
    """
    job = await client.repeats.run_now(queue, name, suffix=MANUAL)
    if job is None:
        return None
    log.info("schedule run now queue=%s name=%s job=%s", queue, name, job.id)
    return job


in_redis, ain_redis = twins(_in_redis)
save_schedule, asave_schedule = twins(_save_schedule)
set_schedule_paused, aset_schedule_paused = twins(_set_schedule_paused)
run_schedule, arun_schedule = twins(_run_schedule)


def when(ms: int) -> datetime:
    """Return epoch milliseconds as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
