"""The dead-letters resource (/dead-letters): the dead letters grouped by error fingerprint, the
jobs of a queue's dead-letter queue, and resubmit or purge them by ids, by group or (resubmit)
every one of a queue, and mute a group (/dead-letters/groups/{fingerprint}/mute): its dead
letters still recorded and counted, but raising no alert (the checks and the audit in
services/mutes.py, shared with the admin).
A group past JOBSITE["BULK_MAX"] changes in the background, as a bulk run (bulk_change.py).

The old /dlq operations stay as aliases answering as before, left out of the schema.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, NamedTuple
from urllib.parse import urlencode

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from django.urls import reverse
from ninja import Field, Path, Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict, model_validator

from engine import JOB_ID_PATTERN
from jobsite.jobs import audit, services
from jobsite.jobs.api.bulk_change import abegin, achange, arunnable, run_out
from jobsite.jobs.api.jobout import engine_values, fields
from jobsite.jobs.api.jobs import IDS_MAX
from jobsite.jobs.api.schemas import (
    ERRORS,
    QUEUE,
    BulkOut,
    BulkRunOut,
    CountOut,
    JobOut,
    Out,
    PurgeIn,
    ResubmitIn,
)
from jobsite.jobs.conf import bulk_max
from jobsite.jobs.history import deadletters
from jobsite.jobs.models import DeadLetterMute
from jobsite.jobs.permissions import Grant, Perm, aneed, grant, need
from jobsite.jobs.services import mutes
from jobsite.jobs.tasks import runnable

router = Router(tags=["dead-letters"])
# The old /dlq operations: the same answers as before, not in the schema.
dlq_aliases = Router(tags=["dead-letters"])


FINGERPRINT = r"^[0-9a-f]{1,32}$"


class MuteIn(Schema):
    """Mute a group in `queue` for `for_s` seconds (null: until unmuted), saying why."""

    model_config = ConfigDict(extra="forbid")

    queue: str = Field(..., pattern=QUEUE)
    for_s: int | None = Field(None, ge=1, le=mutes.MAX_FOR_S)
    reason: str = Field("", max_length=mutes.REASON_CHARS)


class MuteOut(Out):
    """A group muted in one queue: until when (null: until unmuted), by whom, when and why."""

    queue: str
    fingerprint: str
    until: datetime | None
    muted_by: str
    muted_at: datetime
    reason: str


def mute_out(row: DeadLetterMute) -> MuteOut:
    """Return a mute as the API answers it."""
    by = row.muted_by.get_username() if row.muted_by is not None else ""
    return MuteOut(
        queue=row.queue,
        fingerprint=row.fingerprint,
        until=row.until,
        muted_by=by,
        muted_at=row.muted_at,
        reason=row.reason,
    )


class GroupMutes(NamedTuple):
    """The mutes of one group, in the queues it is listed in."""

    mutes: list[MuteOut]
    # Muted in every queue it is listed in.
    muted: bool
    # When the first of its mutes ends (null: muted until unmuted, or not muted).
    muted_until: datetime | None


def of_group(
    held: dict[str, dict[str, DeadLetterMute]], fingerprint: str, queues: list[str]
) -> GroupMutes:
    """Return the mutes holding for group `fingerprint` in `queues` (`held`: mutes.muted())."""
    rows = [held[q][fingerprint] for q in queues if fingerprint in held.get(q, {})]
    muted = bool(queues) and len(rows) == len(queues)
    ends = [r.until for r in rows if r.until is not None]
    return GroupMutes([mute_out(r) for r in rows], muted, min(ends) if muted and ends else None)


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


def _refuse_unknown(task: str | None) -> None:
    """Refuse a resubmit of every dead letter of a task no worker knows (409)."""
    if task is not None and runnable.unknown(task):
        raise HttpError(409, f"task {task!r} is not registered: its jobs cannot run")


def _select(rights: Grant, body: DeadLettersIn, cap: int) -> tuple[list[tuple[str, str]], int]:
    rows = deadletters.dead_rows(rights, body.queue, body.task)
    return deadletters.group_pairs(rows, body.fingerprint or "", cap)


def _queues(rights: Grant, body: DeadLettersIn) -> list[str]:
    """Return the queues a group's dead letters this request sees are in."""
    rows = deadletters.dead_rows(rights, body.queue, body.task)
    chosen = rows.filter(fingerprint=body.fingerprint or "").order_by()
    return list(chosen.values_list("queue", flat=True).distinct())


async def _group(
    request: HttpRequest, body: DeadLettersIn, perm: Perm, action: str
) -> BulkOut | ResubmitOut | Status[BulkRunOut]:
    """Apply `action` to every dead letter of a group, past the cap in the background (202, a
    run); audit it (a resubmit in the request answers with what follows its jobs)."""
    rights = await aneed(request, perm, body.queue)
    cap = bulk_max()
    pairs, matched = await sync_to_async(_select)(rights, body, cap)
    skipped: dict[str, int] = {}
    if matched <= cap:
        pairs = await arunnable(action, pairs, skipped)
    if body.dry_run:
        return BulkOut(matched=matched, changed=0, skipped=skipped)
    queues = await sync_to_async(_queues)(rights, body) if matched > cap else []
    for queue in {q for _, q in pairs} | set(queues):
        await rights.arequire(perm, queue)
    selector = {"dead_letter_group": body.fingerprint, "queue": body.queue, "task": body.task}
    chosen = {"fingerprint": body.fingerprint, "queue": body.queue, "task": body.task}
    if matched > cap:
        await audit.arecord_bulk(rights.user, action, selector, matched, rights.via)
        group = {k: v for k, v in chosen.items() if v is not None}
        begun = await abegin(action, group, matched, rights.queues, rights.user, rights.via)
        return Status(202, run_out(begun))
    changed, since_ms = await achange(action, pairs) if pairs else (0, None)
    await audit.arecord_bulk(rights.user, action, selector, matched, rights.via)
    answer = BulkOut(matched=matched, changed=changed, skipped=skipped)
    if action != "resubmit":
        return answer
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
    pairs = await arunnable(action, [(i, queue) for i in chosen], skipped)
    if dry_run:
        return BulkOut(matched=len(chosen), changed=0, skipped=skipped)
    changed, since_ms = await achange(action, pairs) if pairs else (0, None)
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
@router.post(
    "/resubmit", response={200: ResubmitOut, 202: BulkRunOut, **ERRORS}, exclude_unset=True
)
async def resubmit_dead_letters(
    request: HttpRequest, body: DeadLettersIn
) -> BulkOut | Status[BulkRunOut]:
    """Resubmit dead letters by ids, a whole group, or every one of a queue (`dry_run` counts
    only); the answer says which jobs and where to follow them (`counts_url`: how many
    completed, failed again or still run). A group past JOBSITE["BULK_MAX"] is resubmitted in
    the background (202, a run: GET /bulk/runs/{id} follows it)."""
    if body.fingerprint is not None:
        return await _group(request, body, Perm.RETRY, "resubmit")
    assert body.queue is not None  # DeadLettersIn._chosen
    if body.ids is not None:
        return await _by_ids(request, body.queue, body.ids, body.dry_run, Perm.RETRY, "resubmit")
    return await _whole_queue(request, body.queue, body.task, body.dry_run)


@router.post("/purge", response={200: BulkOut, 202: BulkRunOut, **ERRORS})
async def purge_dead_letters(
    request: HttpRequest, body: DeadLettersIn
) -> BulkOut | Status[BulkRunOut]:
    """Delete dead letters by ids or a whole group from Redis and the history (`dry_run`
    counts only); a group past JOBSITE["BULK_MAX"] in the background (202, a run)."""
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
        pairs = await arunnable("resubmit", [(i, body.queue) for i in body.ids], skipped)
        ids = [i for i, _ in pairs]
        count = await services.aresubmit_dlq(body.queue, ids=ids) if ids else 0
        await audit.arecord(rights.user, "resubmit", body.ids, rights.via)
        return DlqResubmitOut(count=count, skipped=skipped)
    _refuse_unknown(body.task)
    count, left = await runnable.aresubmit_dlq(body.queue, task=body.task)
    selector = {"queue": body.queue, "task": body.task, "dlq": True}
    await audit.arecord_bulk(rights.user, "resubmit", selector, count, rights.via)
    return DlqResubmitOut(count=count, skipped=_skipped(left))


FingerprintPath = Path(..., pattern=FINGERPRINT)  # type: ignore[type-arg]


@router.post("/groups/{fingerprint}/mute", response={200: MuteOut, **ERRORS})
def mute_dead_letter_group(
    request: HttpRequest,
    body: MuteIn,
    fingerprint: str = FingerprintPath,
) -> MuteOut:
    """Mute a dead-letter group in a queue: its dead letters are still recorded and counted but
    raise no alert, for `for_s` seconds or until unmuted (a new mute replaces the old)."""
    row = mutes.mute(grant(request), body.queue, fingerprint, body.for_s, body.reason)
    return mute_out(row)


@router.delete("/groups/{fingerprint}/mute", response={204: None, **ERRORS})
def unmute_dead_letter_group(
    request: HttpRequest,
    fingerprint: str = FingerprintPath,
    queue: str = Query(..., pattern=QUEUE),  # type: ignore[type-arg]
) -> Status[None]:
    """Unmute a dead-letter group in a queue: its dead letters alert again (404: not muted)."""
    if mutes.unmute(grant(request), queue, fingerprint) is None:
        raise HttpError(404, f"dead-letter group {fingerprint} is not muted in queue {queue!r}")
    return Status(204, None)
