"""The dead-letters resource (/dead-letters): the dead letters grouped by error fingerprint, the
jobs of a queue's dead-letter queue, and resubmit or purge them by ids, by group or (resubmit)
every one of a queue; muting a group lives in dead_letter_mutes.py, mounted below /groups.

The old /dlq operations stay as aliases answering as before, left out of the schema.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError
from pydantic import ConfigDict, model_validator

from engine import JOB_ID_PATTERN
from jobsite.jobs import audit, services
from jobsite.jobs.api.dead_letter_mutes import MuteOut, of_group
from jobsite.jobs.api.dead_letter_mutes import router as mutes_router
from jobsite.jobs.api.jobout import engine_values, fields
from jobsite.jobs.api.jobs import IDS_MAX
from jobsite.jobs.api.schemas import (
    ERRORS,
    QUEUE,
    BulkOut,
    CountOut,
    JobOut,
    Out,
    PurgeIn,
    ResubmitIn,
)
from jobsite.jobs.conf import bulk_max
from jobsite.jobs.history import deadletters
from jobsite.jobs.models import JobRecord, JobSearch
from jobsite.jobs.permissions import Grant, Perm, aneed, need
from jobsite.jobs.services import mutes
from jobsite.jobs.tasks import runnable

router = Router(tags=["dead-letters"])
router.add_router("/groups", mutes_router)
# The old /dlq operations: the same answers as before, not in the schema.
dlq_aliases = Router(tags=["dead-letters"])


class SampleOut(Out):
    job_id: str
    exception: str
    type: str
    message: str
    frame: str
    pattern: str
    not_retried: str = ""


class DeadGroupOut(Out):
    """Dead letters sharing an error fingerprint ("" : jobs that recorded no error)."""

    fingerprint: str
    count: int
    first_seen: datetime | None
    last_seen: datetime | None
    tasks: dict[str, int]
    queues: list[str]
    sample: SampleOut | None
    # Why its jobs cannot run again ("": they can): dropped as an unknown task still unknown.
    cannot_run: str = ""
    # Muted in every queue listed: its dead letters raise no alert (counted all the same).
    muted: bool = False
    # When the first of its mutes ends (null: muted until unmuted, or not muted).
    muted_until: datetime | None = None
    # Its mutes holding in the queues listed (a group may be muted in some of them only).
    mutes: list[MuteOut] = []


class DeadLettersIn(Schema):
    """The dead letters to act on: `ids` of `queue`'s dead-letter queue, a group
    (`fingerprint`, narrowed to `queue` and `task` when given), or, to resubmit, every one of
    `queue` (of `task` when given). `dry_run` only counts."""

    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[str, Field(pattern=JOB_ID_PATTERN)]] | None = Field(
        None, min_length=1, max_length=10_000
    )
    fingerprint: str | None = Field(None, max_length=32, pattern=r"^[0-9a-f]*$")
    queue: str | None = Field(None, pattern=QUEUE)
    task: str | None = Field(None, min_length=1, max_length=255)
    dry_run: bool = False

    @model_validator(mode="after")
    def _chosen(self) -> DeadLettersIn:
        if self.ids is not None and self.fingerprint is not None:
            raise ValueError('give "ids" or "fingerprint", not both')
        if self.ids is not None and (self.queue is None or self.task is not None):
            raise ValueError('"ids" go with their "queue" (and no "task")')
        if self.fingerprint is None and self.queue is None:
            raise ValueError(
                'choose the dead letters: "ids" with their "queue", a group\'s "fingerprint", '
                'or a "queue"'
            )
        return self


class ResubmitOut(BulkOut):
    """A resubmit's answer; when it resubmitted some, what follows them: the ids resubmitted
    (by ids or a group; [] for a whole queue), `since` (Redis' time at the resubmit: their rows
    say submitted at or after it once the mirror saw them resubmitted), `counts_url` (GET
    /job-counts of those jobs: how many completed, failed again or still run) and `jobs_url`
    (the dashboard's Jobs page listing them). Up to IDS_MAX ids the links name them; past it they
    select by the group (or queue and task) and `since`, which takes in jobs of the same
    selection submitted since too."""

    ids: list[str] = []
    since: datetime | None = None
    counts_url: str = ""
    jobs_url: str = ""


def _followed(
    answer: BulkOut, ids: list[str], since_ms: int | None, selector: dict[str, str | None]
) -> ResubmitOut:
    """Return a resubmit's answer with the ids resubmitted and the links that follow them."""
    if since_ms is None or not answer.changed:
        return ResubmitOut(**answer.model_dump())
    since = datetime.fromtimestamp(since_ms / 1000, tz=UTC)
    chosen = {"ids": ",".join(ids)} if 0 < len(ids) <= IDS_MAX else selector
    query = urlencode({**{k: v for k, v in chosen.items() if v}, "since": since.isoformat()})
    return ResubmitOut(
        **answer.model_dump(),
        ids=ids,
        since=since,
        counts_url=f"{reverse('jobsite:api:api-root').rstrip('/')}/job-counts?{query}",
        jobs_url=f"{reverse('jobsite:jobs')}?{query}",
    )


@router.get("", response={200: list[DeadGroupOut], **ERRORS})
def dead_letters(
    request: HttpRequest, queue: str | None = None, task: str | None = None
) -> list[DeadGroupOut]:
    """Dead letters of the queues this request may view, grouped by error fingerprint."""
    rights = need(request, Perm.VIEW, queue)
    found = deadletters.groups(deadletters.dead_rows(rights, queue, task))
    out = [DeadGroupOut.model_validate(g, from_attributes=True) for g in found]
    held = mutes.muted({q for g in out for q in g.queues})
    for group in out:
        group.mutes, group.muted, group.muted_until = of_group(
            held, group.fingerprint, group.queues
        )
        kind = group.sample.type if group.sample else ""
        if kind == runnable.UNKNOWN_TASK and all(runnable.unknown(t) for t in group.tasks):
            group.cannot_run = f"{', '.join(sorted(group.tasks))}: {runnable.REASON}"
    return out


class TallyOut(Out):
    """One queue's dead letters in Redis (its DLQ, as the Overview counts them) and in the
    history (rows in a DLQ state, as this page groups them); `without_row`: DLQ ids the history
    has no row for yet, of the first `checked` (reconciliation adds them)."""

    queue: str
    in_redis: int
    in_history: int
    without_row: int
    checked: int


@router.get("/counts", response={200: list[TallyOut], **ERRORS})
def dead_letter_counts(
    request: HttpRequest,
    queue: str | None = Query(None, pattern=QUEUE),  # type: ignore[type-arg]
) -> list[TallyOut]:
    """Count dead letters per queue in Redis and in the history, and those without a row."""
    rights = need(request, Perm.VIEW, queue)
    if queue is not None:
        chosen = [queue]
    else:
        scope = rights.queues
        chosen = [q for q in services.known_queues() if scope is None or q in scope]
    return [
        TallyOut.model_validate(t, from_attributes=True) for t in deadletters.tally(rights, chosen)
    ]


@router.get("/jobs", response={200: list[JobOut], **ERRORS})
@dlq_aliases.get(
    "", response={200: list[JobOut], **ERRORS}, url_name="dlq", include_in_schema=False
)
async def dead_letter_jobs(
    request: HttpRequest,
    queue: str = "default",
    offset: int = Query(0, ge=0, le=10_000_000),  # type: ignore[type-arg]
    limit: int = Query(100, ge=1, le=1000),  # type: ignore[type-arg]
    task: str | None = Query(None, min_length=1, max_length=255),  # type: ignore[type-arg]
    version: int | None = Query(None, ge=1, le=1_000_000),  # type: ignore[type-arg]
) -> list[JobOut]:
    """List the dead-letter queue of a queue, oldest first; only `task` (and `version`)."""
    await aneed(request, Perm.VIEW, queue)
    jobs = await services.arun_engine(
        lambda c: c.dead_letters.list(queue, offset, limit, task=task, version=version)
    )
    return [JobOut(**fields(JobOut, engine_values(j))) for j in jobs]


def _forget(ids: list[str]) -> None:
    """Delete purged jobs from the history, as the admin's purge does."""
    JobSearch.objects.filter(job_id__in=ids).delete()
    JobRecord.objects.filter(id__in=ids).delete()


async def _change(action: str, pairs: list[tuple[str, str]]) -> tuple[int, int | None]:
    """Purge (from Redis and the history) or resubmit jobs; return how many Redis changed and,
    for a resubmit, Redis' time just before it (ms)."""
    if action == "purge":
        changed = await services.apurge(pairs)
        await sync_to_async(_forget)([i for i, _ in pairs])
        return changed, None
    since_ms = await services.aclock_ms({q for _, q in pairs})
    return await services.aresubmit(pairs), since_ms


async def _runnable(
    action: str, pairs: list[tuple[str, str]], skipped: dict[str, int]
) -> list[tuple[str, str]]:
    """Return the pairs `action` may change: a resubmit leaves out the jobs that would only be
    dropped again (an unknown task still unknown), counted in `skipped` with the reason."""
    if action != "resubmit" or not pairs:
        return pairs
    fit, unfit = await runnable.asplit(pairs)
    if unfit:
        skipped[runnable.REASON] = skipped.get(runnable.REASON, 0) + len(unfit)
    return fit


def _refuse_unknown(task: str | None) -> None:
    """Refuse a resubmit of every dead letter of a task no worker knows (409)."""
    if task is not None and runnable.unknown(task):
        raise HttpError(409, f"task {task!r} is not registered: its jobs cannot run")


def _select(rights: Grant, body: DeadLettersIn, cap: int) -> tuple[list[tuple[str, str]], int]:
    rows = deadletters.dead_rows(rights, body.queue, body.task)
    return deadletters.group_pairs(rows, body.fingerprint or "", cap)


async def _group(
    request: HttpRequest, body: DeadLettersIn, perm: Perm, action: str
) -> BulkOut | ResubmitOut:
    """Apply `action` to every dead letter of a group, within the cap; audit it (a resubmit
    answers with what follows its jobs)."""
    rights = await aneed(request, perm, body.queue)
    cap = bulk_max()
    pairs, matched = await sync_to_async(_select)(rights, body, cap)
    skipped: dict[str, int] = {}
    if matched <= cap:
        pairs = await _runnable(action, pairs, skipped)
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
    changed, since_ms = await _change(action, pairs) if pairs else (0, None)
    selector = {"dead_letter_group": body.fingerprint, "queue": body.queue, "task": body.task}
    await audit.arecord_bulk(rights.user, action, selector, matched, rights.via)
    answer = BulkOut(matched=matched, changed=changed, skipped=skipped)
    if action != "resubmit":
        return answer
    chosen = {"fingerprint": body.fingerprint, "queue": body.queue, "task": body.task}
    return _followed(answer, [i for i, _ in pairs], since_ms, chosen)


async def _by_ids(
    request: HttpRequest, queue: str, ids: list[str], dry_run: bool, perm: Perm, action: str
) -> BulkOut | ResubmitOut:
    """Apply `action` to the ids the dead-letter queue of `queue` holds (others are skipped);
    a resubmit answers with what follows its jobs."""
    rights = await aneed(request, perm, queue)
    dead = await services.arun_engine(lambda c: c.dead_letters.contains(queue, ids))
    chosen = list(dict.fromkeys(i for i in ids if i in dead))
    left = len(set(ids)) - len(chosen)
    skipped = {"not in the dead-letter queue": left} if left else {}
    pairs = await _runnable(action, [(i, queue) for i in chosen], skipped)
    if dry_run:
        return BulkOut(matched=len(chosen), changed=0, skipped=skipped)
    changed, since_ms = await _change(action, pairs) if pairs else (0, None)
    await audit.arecord(rights.user, action, chosen, rights.via)
    answer = BulkOut(matched=len(chosen), changed=changed, skipped=skipped)
    if action != "resubmit":
        return answer
    return _followed(answer, [i for i, _ in pairs], since_ms, {"queue": queue})


def _count(rights: Grant, queue: str, task: str | None) -> tuple[int, int]:
    """Return how many dead letters of `queue` (of `task`) the history holds, and how many of
    them could not run again."""
    rows = deadletters.dead_rows(rights, queue, task)
    return rows.count(), runnable.count_unfit(rows)


def _skipped(left: int) -> dict[str, int]:
    return {runnable.REASON: left} if left else {}


async def _whole_queue(
    request: HttpRequest, queue: str, task: str | None, dry: bool
) -> ResubmitOut:
    """Resubmit every dead letter of `queue` (of `task`) but those that cannot run (skipped
    with the reason); a dry run counts the history's."""
    rights = await aneed(request, Perm.RETRY, queue)
    _refuse_unknown(task)
    if dry:
        matched, left = await sync_to_async(_count)(rights, queue, task)
        return ResubmitOut(matched=matched, changed=0, skipped=_skipped(left))
    since_ms = await services.aclock_ms([queue])
    count, left = await runnable.aresubmit_dlq(queue, task=task)
    selector = {"queue": queue, "task": task, "dlq": True}
    await audit.arecord_bulk(rights.user, "resubmit", selector, count, rights.via)
    answer = BulkOut(matched=count + left, changed=count, skipped=_skipped(left))
    return _followed(answer, [], since_ms, {"queue": queue, "task": task})


# What follows the jobs only when some were resubmitted: a dry run answers as before.
@router.post("/resubmit", response={200: ResubmitOut, **ERRORS}, exclude_unset=True)
async def resubmit_dead_letters(request: HttpRequest, body: DeadLettersIn) -> BulkOut:
    """Resubmit dead letters by ids, a whole group, or every one of a queue (`dry_run` counts
    only); the answer says which jobs and where to follow them (`counts_url`: how many
    completed, failed again or still run)."""
    if body.fingerprint is not None:
        return await _group(request, body, Perm.RETRY, "resubmit")
    assert body.queue is not None  # DeadLettersIn._chosen
    if body.ids is not None:
        return await _by_ids(request, body.queue, body.ids, body.dry_run, Perm.RETRY, "resubmit")
    return await _whole_queue(request, body.queue, body.task, body.dry_run)


@router.post("/purge", response={200: BulkOut, **ERRORS})
async def purge_dead_letters(request: HttpRequest, body: DeadLettersIn) -> BulkOut:
    """Delete dead letters by ids or a whole group from Redis and the history (`dry_run`
    counts only)."""
    if body.fingerprint is not None:
        return await _group(request, body, Perm.PURGE, "purge")
    if body.ids is None or body.queue is None:
        raise HttpError(422, 'purge takes "ids" with their "queue", or a group\'s "fingerprint"')
    return await _by_ids(request, body.queue, body.ids, body.dry_run, Perm.PURGE, "purge")


@dlq_aliases.post("/purge", response={200: CountOut, **ERRORS}, include_in_schema=False)
async def dlq_purge(request: HttpRequest, body: PurgeIn) -> CountOut:
    """Delete jobs of a queue's dead-letter queue by id (ids not in it are left alone)."""
    rights = await aneed(request, Perm.PURGE, body.queue)
    dead = await services.arun_engine(lambda c: c.dead_letters.contains(body.queue, body.ids))
    chosen = [i for i in body.ids if i in dead]
    count = await services.apurge([(i, body.queue) for i in chosen]) if chosen else 0
    await audit.arecord(rights.user, "purge", chosen, rights.via)
    return CountOut(count=count)


class DlqResubmitOut(CountOut):
    """How many were resubmitted, and why the others were left (reason -> count; left out
    when none were)."""

    skipped: dict[str, int] = {}


# `skipped` only when something was (else the answer is the old `{count}`).
@dlq_aliases.post(
    "/resubmit",
    response={200: DlqResubmitOut, **ERRORS},
    include_in_schema=False,
    exclude_defaults=True,
)
async def dlq_resubmit(request: HttpRequest, body: ResubmitIn) -> DlqResubmitOut:
    """Resubmit DLQ jobs by ids, or every one of a task (or all) in a queue; those that would
    only be dropped again stay in the DLQ, counted in `skipped`."""
    rights = await aneed(request, Perm.RETRY, body.queue)
    skipped: dict[str, int] = {}
    if body.ids is not None:
        pairs = await _runnable("resubmit", [(i, body.queue) for i in body.ids], skipped)
        ids = [i for i, _ in pairs]
        count = await services.aresubmit_dlq(body.queue, ids=ids) if ids else 0
        await audit.arecord(rights.user, "resubmit", body.ids, rights.via)
        return DlqResubmitOut(count=count, skipped=skipped)
    _refuse_unknown(body.task)
    count, left = await runnable.aresubmit_dlq(body.queue, task=body.task)
    selector = {"queue": body.queue, "task": body.task, "dlq": True}
    await audit.arecord_bulk(rights.user, "resubmit", selector, count, rights.via)
    return DlqResubmitOut(count=count, skipped=_skipped(left))
