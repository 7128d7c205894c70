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

from engine import Client, Job, Repeatable
from engine.connection import server_ms

from .models import JobRecord
from .services import twins

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


def next_runs(rep: Repeatable, next_ms: int | None, count: int = NEXT_RUNS) -> list[int]:
    """Return the next `count` fire times from the stored next tick (none when paused)."""
    out: list[int] = []
    tick = None if rep.paused else next_ms
    while tick is not None and tick <= MAX_MS and len(out) < count:
        out.append(tick)
        tick = rep.next_after(tick)
    return out


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


async def _from_history(queue: str, name: str) -> LastRun | None:
    """Return the newest job of schedule `name` the history holds (a primary-key range)."""
    prefix = f"{name}@"
    row = await (
        JobRecord.objects.filter(queue=queue, id__gt=prefix, id__lt=f"{name}A")
        .filter(id__startswith=prefix)
        .order_by("-id")
        .values("id", "state")
        .afirst()
    )
    return None if row is None else _last_run(row["id"], row["state"])


async def _last_runs(client: Client, queue: str, names: list[str]) -> dict[str, LastRun | None]:
    """Return the last run of each schedule `names` of `queue`."""
    if not names:
        return {}
    keys = client.keys(queue)
    ids: list[str | None] = await client.redis.hmget(keys.repeat_last, names)  # type: ignore[assignment]
    async with client.redis.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hget(keys.job(job_id or "-"), "state")
        states: list[str | None] = await pipe.execute()
    gone = [i for i, s in zip(ids, states, strict=True) if i is not None and s is None]
    rows = JobRecord.objects.filter(id__in=gone).values_list("id", "state")
    kept = {i: s async for i, s in rows} if gone else {}
    out: dict[str, LastRun | None] = {}
    for name, job_id, state in zip(names, ids, states, strict=True):
        if job_id is None:
            out[name] = await _from_history(queue, name)
        else:
            out[name] = _last_run(job_id, state or kept.get(job_id))
    return out


async def _schedules(client: Client, queues: Iterable[str]) -> list[ScheduleState]:
    """Return the schedules of `queues`, by queue then name."""
    out: list[ScheduleState] = []
    for queue in queues:
        listed = await client.repeats.list(queue)
        last = await _last_runs(client, queue, [rep.name for rep, _ in listed])
        out += [ScheduleState(r, next_runs(r, due), last[r.name]) for r, due in listed]
    return out


async def _schedule(client: Client, queue: str, name: str) -> ScheduleState | None:
    """Return schedule `name` of `queue`, or None."""
    found = [s for s in await _schedules(client, [queue]) if s.rep.name == name]
    return found[0] if found else None


async def _save_schedule(
    client: Client, name: str, job: Job, *, exists: bool | None, **timing: Any
) -> Repeatable | None:
    """Store schedule `name` submitting copies of `job`, timed by `timing` (Repeats.add).

    With `exists` True (edit) or False (create), store only when the schedule does (or does
    not) exist yet; return None when that does not hold.
    """
    if exists is not None and (await client.repeats.get(job.queue, name) is None) == exists:
        return None
    return await client.repeats.add(name, job, **timing)


async def _set_schedule_paused(client: Client, queue: str, name: str, paused: bool) -> bool:
    """Pause or resume schedule `name`; return False when there is none."""
    if await client.repeats.get(queue, name) is None:
        return False
    await (client.repeats.pause if paused else client.repeats.resume)(queue, name)
    return True


async def _remove_schedule(client: Client, queue: str, name: str) -> bool:
    """Delete schedule `name`; return whether it existed. Jobs it submitted stay."""
    return await client.repeats.remove(queue, name)


async def _run_schedule(client: Client, queue: str, name: str) -> Job | None:
    """Submit one job of schedule `name` now (id `name@<ms>m`); None when there is none.

    It becomes the schedule's last run, so `skip_if_running` ticks wait for it too.
    """
    rep = await client.repeats.get(queue, name)
    if rep is None:
        return None
    now_ms = await server_ms(client.redis)
    job = rep.job_for(now_ms)
    job.id = f"{name}@{now_ms}{MANUAL}"
    await client.enqueue_many([job])
    await client.redis.hset(client.keys(queue).repeat_last, name, job.id)  # type: ignore[misc]
    log.info("schedule run now queue=%s name=%s job=%s", queue, name, job.id)
    return job


schedules, aschedules = twins(_schedules)
schedule, aschedule = twins(_schedule)
save_schedule, asave_schedule = twins(_save_schedule)
set_schedule_paused, aset_schedule_paused = twins(_set_schedule_paused)
remove_schedule, aremove_schedule = twins(_remove_schedule)
run_schedule, arun_schedule = twins(_run_schedule)


def when(ms: int) -> datetime:
    """Return epoch milliseconds as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)
