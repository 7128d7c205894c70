"""Schedules in the JSON API: list, read, create, edit, pause, resume, run now and delete.

Reads need the view permission, changes `change_queuerecord` (as pausing a queue does), both
on the schedule's queue. A
schedule declared in settings (origin "settings") changed here is marked overridden: the next
sync of the declaration keeps the change; deleting it drops the change (the next `runworker`
start declares it again).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from engine import ConfigError, F, Job, validate_queue_name
from jobsite.jobs import audit, conf, services
from jobsite.jobs.api.flows import FlowIn, build_flow
from jobsite.jobs.api.schemas import ERRORS, Out
from jobsite.jobs.models import Schedule
from jobsite.jobs.permissions import Grant, Perm, aneed
from jobsite.jobs.services.schedules import (
    MAX_MS,
    ScheduleState,
    arun_schedule,
    asave_schedule,
    aschedule,
    aschedules,
    aset_schedule_paused,
    remaining,
    when,
)
from jobsite.jobs.tasks.schedules import runtime_job

router = Router(tags=["schedules"])


class TimingIn(Schema):
    """When a schedule fires and what each run gets: one task's call, or a whole flow. A key
    it does not know (`job_id`, a misspelt option) is a 422 naming it, never dropped."""

    model_config = ConfigDict(extra="forbid")

    task: str | None = None
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    # A flow each tick (as POST /flows takes it; depends_on names refs of this flow only).
    flow: FlowIn | None = None
    # Ticks it fires, then it ends.
    repeat_limit: int | None = Field(None, ge=1, le=1_000_000_000)
    # From a millisecond to ten years.
    every_s: float | None = Field(None, ge=0.001, le=315_576_000, allow_inf_nan=False)
    cron: str | None = Field(None, max_length=200)
    tz: str = Field("UTC", max_length=100)
    skip_if_running: bool = False
    # How late a tick may fire or its run start before its health says so (None: the
    # default, JOBSITE["HEALTH"]["SCHEDULE_TOLERANCE_S"]).
    tolerance_s: float | None = Field(None, gt=0, le=315_576_000, allow_inf_nan=False)
    start_at: datetime | None = None
    end_at: datetime | None = None


class ScheduleIn(TimingIn):
    """A new schedule: its name, its queue (default: the task's) and its timing."""

    name: str = Field(..., max_length=113)
    queue: str | None = Field(None, max_length=100)
    paused: bool = False


class ScheduleEditIn(TimingIn):
    """A schedule's new definition; `paused` left out keeps it as it is."""

    paused: bool | None = None


class FlowMemberOut(Out):
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    parents: list[int]


class LastRunOut(Out):
    id: str
    state: str | None
    at: datetime
    manual: bool


class ScheduleOut(Out):
    name: str
    queue: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int
    every_s: float | None
    cron: str | None
    tz: str
    skip_if_running: bool
    tolerance_s: float | None = None
    start_at: datetime | None
    end_at: datetime | None
    paused: bool
    origin: str
    overridden: bool
    next_runs: list[datetime]
    last_run: LastRunOut | None
    repeat_limit: int | None = None
    # Ticks fired since the schedule was stored, and those left (None: no repeat_limit).
    fired: int = 0
    remaining: int | None = None
    # A scheduled flow's jobs, parents first (parents: indexes of earlier jobs); None: one job.
    flow: list[FlowMemberOut] | None = None


class RunOut(Out):
    id: str
    queue: str
    schedule: str
    state: str


def schedule_out(state: ScheduleState) -> ScheduleOut:
    """Return a schedule as the API shows it."""
    rep = state.rep
    job = Job.from_hash({**rep.job, F.id: f"{rep.name}@0"})
    last = state.last_run
    return ScheduleOut(
        name=rep.name,
        queue=rep.queue,
        task=job.task,
        args=job.args,
        kwargs=job.kwargs,
        priority=job.priority,
        every_s=rep.every_s,
        cron=rep.cron,
        tz=rep.tz,
        skip_if_running=rep.skip_if_running,
        tolerance_s=rep.tolerance_s,
        start_at=when(rep.start_at_ms) if 0 < rep.start_at_ms <= MAX_MS else None,
        end_at=when(rep.end_at_ms)
        if rep.end_at_ms is not None and rep.end_at_ms <= MAX_MS
        else None,
        paused=rep.paused,
        origin=rep.origin,
        overridden=rep.overridden,
        next_runs=[when(ms) for ms in state.next_runs_ms],
        last_run=None
        if last is None
        else LastRunOut(id=last.id, state=last.state, at=when(last.at_ms), manual=last.manual),
        repeat_limit=rep.repeat_limit,
        fired=state.fired,
        remaining=remaining(rep, state.fired),
        flow=None if rep.flow is None else [_member(m) for m in rep.flow],
    )


def _member(member: dict[str, Any]) -> FlowMemberOut:
    job = Job.from_hash({**member["job"], F.id: "x"})
    return FlowMemberOut(task=job.task, args=job.args, kwargs=job.kwargs, parents=member["parents"])


def _where(queue: str, name: str) -> str:
    return f"{queue}/{name}"


async def _one(queue: str, name: str) -> ScheduleOut:
    found = await aschedule(queue, name)
    if found is None:
        raise HttpError(404, f"no schedule named {name!r} in queue {queue!r}")
    return schedule_out(found)


def _valid_queue(queue: str) -> None:
    """Answer 404 for a queue name that cannot exist (so nothing odd reaches Redis)."""
    try:
        validate_queue_name(queue)
    except ConfigError:
        raise HttpError(404, f"no queue named {queue!r}") from None


def _visible(rights: Grant, names: list[str]) -> list[str]:
    return [q for q in names if rights.allows(Perm.VIEW, q)]


@router.get("", response={200: list[ScheduleOut], **ERRORS})
async def list_schedules(request: HttpRequest, queue: str | None = None) -> list[ScheduleOut]:
    """Every schedule of the queues this user may see, with next fire times and last run."""
    rights = await aneed(request, Perm.VIEW, queue)
    known = sorted({*conf.queues(), *await services.aknown_queues()})
    names = [queue] if queue is not None else known
    names = await sync_to_async(_visible)(rights, [q for q in names if q in known])
    return [schedule_out(s) for s in await aschedules(names)]


@router.get("/{queue}/{schedule}", response={200: ScheduleOut, **ERRORS})
async def get_schedule(request: HttpRequest, queue: str, schedule: str) -> ScheduleOut:
    """One schedule."""
    await aneed(request, Perm.VIEW, queue)
    _valid_queue(queue)
    return await _one(queue, schedule)


def _timing(body: TimingIn, paused: bool) -> dict[str, Any]:
    return {
        "every_s": body.every_s,
        "cron": body.cron,
        "tz": body.tz,
        "skip_if_running": body.skip_if_running,
        "tolerance_s": body.tolerance_s,
        "start_at": body.start_at,
        "end_at": body.end_at,
        "paused": paused,
        "repeat_limit": body.repeat_limit,
    }


async def _what(rights: Grant, body: TimingIn, queue: str | None) -> Job | list[Job]:
    """Return the job each tick submits, or the flow's jobs; 422 unless exactly one is given."""
    if (body.task is None) == (body.flow is None):
        raise HttpError(422, "give a task (with args, kwargs) or a flow, not both")
    if body.task is not None:
        return runtime_job(body.task, body.args, body.kwargs, queue)
    assert body.flow is not None
    chosen = [j.ref for j in body.flow.jobs if j.job_id is not None]
    if chosen:  # every tick names its jobs itself (name@<ms>, then .1, .2...)
        raise HttpError(
            422, f"a schedule's jobs take their ids from its ticks: drop job_id of {chosen}"
        )
    if queue is not None:
        queued = [j.model_copy(update={"queue": j.queue or queue}) for j in body.flow.jobs]
        body.flow = body.flow.model_copy(update={"jobs": queued})
    jobs, _ = await build_flow(rights, body.flow)
    for job in jobs:
        conf.check_queue(job.queue)
    return jobs


@router.post("", response={201: ScheduleOut, **ERRORS})
async def create_schedule(request: HttpRequest, body: ScheduleIn) -> Status[ScheduleOut]:
    """Create a schedule: checked (task, arguments, cron, time zone) before anything is stored."""
    rights = await aneed(request, Perm.CHANGE_QUEUE)
    job = await _what(rights, body, body.queue)
    queue = job.queue if isinstance(job, Job) else job[0].queue
    await rights.arequire(Perm.CHANGE_QUEUE, queue)
    timing = _timing(body, body.paused)
    if await asave_schedule(body.name, job, exists=False, **timing) is None:
        raise HttpError(409, f"queue {queue!r} already has a schedule named {body.name!r}")
    await audit.arecord(
        rights.user, "create", [_where(queue, body.name)], rights.via, model=Schedule
    )
    return Status(201, await _one(queue, body.name))


@router.put("/{queue}/{schedule}", response={200: ScheduleOut, **ERRORS})
async def edit_schedule(
    request: HttpRequest, queue: str, schedule: str, body: ScheduleEditIn
) -> ScheduleOut:
    """Replace a schedule's definition; a declared one is marked overridden."""
    rights = await aneed(request, Perm.CHANGE_QUEUE, queue)
    _valid_queue(queue)
    current = await _one(queue, schedule)
    job = await _what(rights, body, queue)
    paused = current.paused if body.paused is None else body.paused
    if await asave_schedule(schedule, job, exists=True, **_timing(body, paused)) is None:
        raise HttpError(404, f"no schedule named {schedule!r} in queue {queue!r}")
    await audit.arecord(rights.user, "edit", [_where(queue, schedule)], rights.via, model=Schedule)
    return await _one(queue, schedule)


async def _set_paused(request: HttpRequest, queue: str, name: str, paused: bool) -> ScheduleOut:
    rights = await aneed(request, Perm.CHANGE_QUEUE, queue)
    _valid_queue(queue)
    if not await aset_schedule_paused(queue, name, paused):
        raise HttpError(404, f"no schedule named {name!r} in queue {queue!r}")
    action = "pause" if paused else "resume"
    await audit.arecord(rights.user, action, [_where(queue, name)], rights.via, model=Schedule)
    return await _one(queue, name)


@router.post("/{queue}/{schedule}/pause", response={200: ScheduleOut, **ERRORS})
async def pause_schedule(request: HttpRequest, queue: str, schedule: str) -> ScheduleOut:
    """Stop firing until resumed (a run now still works)."""
    return await _set_paused(request, queue, schedule, True)


@router.post("/{queue}/{schedule}/resume", response={200: ScheduleOut, **ERRORS})
async def resume_schedule(request: HttpRequest, queue: str, schedule: str) -> ScheduleOut:
    """Fire again, from the next tick after now."""
    return await _set_paused(request, queue, schedule, False)


@router.post("/{queue}/{schedule}/run", response={201: RunOut, **ERRORS})
async def run_schedule(request: HttpRequest, queue: str, schedule: str) -> Status[RunOut]:
    """Submit one job of the schedule now, with the id `<name>@<ms>m` (ticks have no `m`)."""
    rights = await aneed(request, Perm.CHANGE_QUEUE, queue)
    _valid_queue(queue)
    job = await arun_schedule(queue, schedule)
    if job is None:
        raise HttpError(404, f"no schedule named {schedule!r} in queue {queue!r}")
    where = _where(queue, schedule)
    await audit.arecord(rights.user, "run", [where], rights.via, model=Schedule, outcome=job.id)
    await audit.arecord(rights.user, "submit", [job.id], rights.via, outcome=f"schedule {where}")
    return Status(201, RunOut(id=job.id, queue=queue, schedule=schedule, state="submitted"))


@router.delete("/{queue}/{schedule}", response={204: None, **ERRORS})
async def delete_schedule(request: HttpRequest, queue: str, schedule: str) -> Status[None]:
    """Delete a schedule; the jobs it submitted stay. A declared one returns at the next sync."""
    rights = await aneed(request, Perm.CHANGE_QUEUE, queue)
    _valid_queue(queue)
    if not await services.arun_engine(lambda c: c.repeats.remove(queue, schedule)):
        raise HttpError(404, f"no schedule named {schedule!r} in queue {queue!r}")
    await audit.arecord(
        rights.user, "delete", [_where(queue, schedule)], rights.via, model=Schedule
    )
    return Status(204, None)
