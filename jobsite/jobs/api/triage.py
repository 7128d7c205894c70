"""Dead-letter triage and replay (API router, mounted beside api.router by apiroot.py).

GET /dead-letters groups the dead letters by error fingerprint; POST /dead-letters/resubmit
and /dead-letters/purge act on a whole group (`dry_run` only counts); POST /jobs/{id}/replay
submits a new job of the same task with edited arguments, linked to the original.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from engine import InvalidArguments, JobNotFound
from engine import Job as EngineJob
from jobsite.jobs import audit, services
from jobsite.jobs.api.jobs import ERRORS, _live_out, _task
from jobsite.jobs.api.schemas import QUEUE, BulkOut, JobDetailOut, Out
from jobsite.jobs.arguments import check_types
from jobsite.jobs.conf import bulk_max
from jobsite.jobs.history import deadletters
from jobsite.jobs.models import JobRecord, JobSearch
from jobsite.jobs.permissions import Grant, Perm, aneed, need
from jobsite.jobs.tasks import runnable

router = Router(tags=["triage"])


class SampleOut(Out):
    job_id: str
    exception: str
    type: str
    message: str
    frame: str
    pattern: str


class DeadGroupOut(Out):
    """Dead letters sharing an error fingerprint ("" : jobs that recorded no error)."""

    fingerprint: str
    count: int
    first_seen: datetime | None
    last_seen: datetime | None
    tasks: dict[str, int]
    queues: list[str]
    sample: SampleOut | None
    # Why its jobs cannot run again ("" : they can): dropped as an unknown task still unknown.
    cannot_run: str = ""


class GroupIn(Schema):
    """One group of dead letters, narrowed to a queue or a task when given."""

    model_config = ConfigDict(extra="forbid")

    fingerprint: str = Field(..., max_length=32, pattern=r"^[0-9a-f]*$")
    queue: str | None = Field(None, pattern=QUEUE)
    task: str | None = Field(None, min_length=1, max_length=255)
    dry_run: bool = False


class ReplayIn(Schema):
    """The arguments of the replay; a part left out is the original's."""

    model_config = ConfigDict(extra="forbid")

    args: list[Any] | None = None
    kwargs: dict[str, Any] | None = None


@router.get("/dead-letters", response={200: list[DeadGroupOut], **ERRORS})
def dead_letters(
    request: HttpRequest, queue: str | None = None, task: str | None = None
) -> list[DeadGroupOut]:
    """Dead letters of the queues this request may view, grouped by error fingerprint."""
    rights = need(request, Perm.VIEW, queue)
    found = deadletters.groups(deadletters.dead_rows(rights, queue, task))
    out = [DeadGroupOut.model_validate(g, from_attributes=True) for g in found]
    for group in out:
        kind = group.sample.type if group.sample else ""
        if kind == runnable.UNKNOWN_TASK and all(runnable.unknown(t) for t in group.tasks):
            group.cannot_run = f"{', '.join(sorted(group.tasks))}: {runnable.REASON}"
    return out


def _select(rights: Grant, body: GroupIn, cap: int) -> tuple[list[tuple[str, str]], int]:
    rows = deadletters.dead_rows(rights, body.queue, body.task)
    return deadletters.group_pairs(rows, body.fingerprint, cap)


async def _apply(request: HttpRequest, body: GroupIn, perm: Perm, action: str) -> BulkOut:
    """Apply `action` to every dead letter of a group, within the cap; audit it."""
    rights = await aneed(request, perm, body.queue)
    cap = bulk_max()
    pairs, matched = await sync_to_async(_select)(rights, body, cap)
    skipped: dict[str, int] = {}
    if action == "resubmit" and matched <= cap:  # those that would only be dropped again
        pairs, unfit = await runnable.asplit(pairs)
        if unfit:
            skipped[runnable.REASON] = len(unfit)
    if body.dry_run:
        return BulkOut(matched=matched, changed=0, skipped=skipped)
    if matched > cap:
        raise HttpError(
            422,
            f"{matched} jobs in this group; one request may change at most {cap} "
            "(JOBSITE['BULK_MAX']): narrow it by queue or task",
        )
    for queue in {q for _, q in pairs}:
        await rights.arequire(perm, queue)
    if action == "purge":
        changed = await services.apurge(pairs)
        await sync_to_async(_forget)([i for i, _ in pairs])
    else:
        changed = await services.aresubmit(pairs) if pairs else 0
    selector = {"dead_letter_group": body.fingerprint, "queue": body.queue, "task": body.task}
    await audit.arecord_bulk(rights.user, action, selector, matched, rights.via)
    return BulkOut(matched=matched, changed=changed, skipped=skipped)


def _forget(ids: list[str]) -> None:
    """Delete purged jobs from the history, as the admin's purge does."""
    JobSearch.objects.filter(job_id__in=ids).delete()
    JobRecord.objects.filter(id__in=ids).delete()


@router.post("/dead-letters/resubmit", response={200: BulkOut, **ERRORS})
async def resubmit_group(request: HttpRequest, body: GroupIn) -> BulkOut:
    """Resubmit every dead letter of a group (`dry_run` counts only)."""
    return await _apply(request, body, Perm.RETRY, "resubmit")


@router.post("/dead-letters/purge", response={200: BulkOut, **ERRORS})
async def purge_group(request: HttpRequest, body: GroupIn) -> BulkOut:
    """Delete every dead letter of a group from Redis and the history (`dry_run` counts only)."""
    return await _apply(request, body, Perm.PURGE, "purge")


async def _original(job_id: str) -> tuple[str, str, int, list[Any], dict[str, Any]]:
    """Return task, queue, priority, args and kwargs of a job, live or from the history."""
    try:
        job = await services.aget_job(job_id)
        return job.task, job.queue, job.priority, job.args, job.kwargs
    except JobNotFound:
        row = await JobRecord.objects.filter(id=job_id).afirst()
        if row is None:
            raise HttpError(404, f"no job with id {job_id!r}") from None
        return row.task, row.queue, row.priority, row.args, row.kwargs


@router.post("/jobs/{job_id}/replay", response={201: JobDetailOut, **ERRORS})
async def replay(request: HttpRequest, job_id: str, body: ReplayIn) -> Status[JobDetailOut]:
    """Submit a new job of the same task, queue and priority with edited arguments."""
    rights = await aneed(request, Perm.RETRY)
    name, queue, priority, args, kwargs = await _original(job_id)
    await rights.arequire(Perm.RETRY, queue)
    task = _task(name)
    args = body.args if body.args is not None else args
    kwargs = body.kwargs if body.kwargs is not None else kwargs
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise HttpError(422, "the original's arguments are not JSON; give args and kwargs")
    check_types(task, args, kwargs)
    try:
        job: EngineJob = task.using(queue=queue, priority=priority).call(*args, **kwargs)
    except InvalidArguments as exc:
        raise HttpError(422, str(exc)) from None
    job.replay_of = job_id
    await services.asubmit(job)
    await audit.arecord(
        rights.user, "replay", [job_id, job.id], rights.via, outcome=f"{job_id} -> {job.id}"
    )
    return Status(201, await _live_out(job.id, job.queue, JobDetailOut))
