"""The one gate every submission passes: `admit` (sync) and `aadmit` (async).

Every way a job comes to exist in the app ends here: the API's jobs, flows, replays and
repeating jobs, the django.tasks backend, `services.enqueue`, an engine task's own `enqueue()`
and `delay()`, the outbox relay and reconciliation's resubmits. Before anything reaches Redis,
one call checks the whole batch:

- each queue is one the project serves (JOBSITE["QUEUES"], unless ANY_QUEUE), or one the
  caller's own queue rule accepted and names (`queue_accepted_by`: only the django.tasks
  backend, whose TASKS[alias]["QUEUES"] decide for its tasks, `[]` meaning any queue, as Django
  defines it); an outbox row keeps that name, so the relay admits it again under the same rule;
- no id a caller chose names a job of another queue in the history (Redis may have forgotten
  that job; the history has not). The engine then checks what Redis holds: the id's
  reservation and the job hashes of other queues (engine/producing/enqueueing.py);
- a flow needs Redis (eager mode runs single jobs, and their callbacks after them).

A job's callbacks (on_success, on_failure: `Job.callbacks`) are checked as jobs of the batch
(queue, arguments, chosen ids) and recorded with it; they travel with their job (to the
outbox too) and the engine writes them with it, in the same step.

Then it runs the jobs inline (eager mode), writes them to the outbox (inside a transaction,
when asked) or submits them, and records who submitted them in the audit trail when a person
or a token did. A schedule's ticks and "run now" submit in the engine under ids of the form
`name@<ms>`, which a caller cannot choose (the '@' is kept for them), and a schedule's name is
unique across queues, so they need no identity check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone

from engine import ConfigError, DuplicateJob, Job, JobIdTaken, with_callbacks
from jobsite.jobs import audit
from jobsite.jobs.conf import check_queue, engine_settings, option
from jobsite.jobs.models import JobRecord, OutboxEntry
from jobsite.jobs.services import engineloop

log = logging.getLogger("jobsite.submission")

# How JOBSITE["EAGER"] runs a job here and now: jobsite.jobs.tasks.eager.run_inline, handed over
# by the app's ready() (the tasks wing sits above this one and needs the registry).
_inline_runners: list[Callable[[Job], Job]] = []


def run_eagerly_with(runner: Callable[[Job], Job]) -> None:
    """Set the function that runs a job inline when JOBSITE["EAGER"] is on."""
    _inline_runners[:] = [runner]


# How a job's arguments are checked against its task's type hints (the engine's
# check_job_arguments with the registry), handed over by the app's ready() for the same reason.
_argument_checks: list[Callable[[Job], None]] = []


def check_arguments_with(check: Callable[[Job], None]) -> None:
    """Set the function that checks a job's arguments (ArgumentTypeError when one is wrong)."""
    _argument_checks[:] = [check]


@dataclass(frozen=True, slots=True)
class Actor:
    """Who submits, for the audit trail: a user, the surface (`via`), and what to note."""

    user: Any
    via: str
    action: str = "submit"
    outcome: str | None = None
    # Ids to log beside the admitted jobs' (a replay logs its original too).
    also: tuple[str, ...] = field(default=())


def taken(ids: list[str]) -> JobIdTaken:
    """Return the refusal of chosen ids held elsewhere; it never names the other queue."""
    return JobIdTaken(f"job ids are taken: {', '.join(ids)}", tuple(ids))


def _check(
    jobs: list[Job], flow: bool, queue_accepted_by: str, again: bool, types: bool | None
) -> dict[str, str]:
    """Check queues, arguments and the shape of the batch; return chosen id -> its job's queue.

    `queue_accepted_by` names the rule that accepted the jobs' queues instead of JOBSITE
    ["QUEUES"] ("": none, JOBSITE["QUEUES"] decides). `types` checks the arguments against
    their tasks' type hints (None: as JOBSITE["CHECK_ARGUMENT_TYPES"] says); jobs admitted
    `again` were checked the first time.
    """
    if not queue_accepted_by:
        for job in jobs:
            check_queue(job.queue)
    if types is None:
        types = engine_settings().check_argument_types
    if types and not again and _argument_checks:
        for job in jobs:
            _argument_checks[0](job)
    if flow and _eager():
        raise ConfigError("flows need Redis: JOBSITE['EAGER'] runs single jobs only")
    return {job.id: job.queue for job in jobs if not job.generated_id}


def _held_elsewhere(chosen: dict[str, str], rows: list[tuple[str, str]]) -> None:
    """Raise JobIdTaken for a chosen id whose history row belongs to another queue."""
    found = sorted(job_id for job_id, queue in rows if chosen.get(job_id) != queue)
    if found:
        raise taken(found)


def _rows(chosen: dict[str, str]) -> Any:
    return JobRecord.objects.filter(id__in=list(chosen)).values_list("id", "queue")


def _eager() -> bool:
    return bool(option("EAGER"))


def _run_inline(job: Job) -> Job:
    if not _inline_runners:
        raise ConfigError("JOBSITE['EAGER'] needs the jobsite.jobs app loaded (INSTALLED_APPS)")
    return _inline_runners[0](job)


def _record(jobs: list[Job], by: Actor | None, flow: bool) -> None:
    if by is None:
        return
    outcome = by.outcome
    if outcome is None and flow and jobs:
        outcome = f"flow {jobs[0].flow_id}"
    ids = [j.id for j in with_callbacks(jobs)]
    audit.record(by.user, by.action, [*by.also, *ids], by.via, outcome=outcome)


def outbox_payload(job: Job, queue_accepted_by: str = "") -> dict[str, Any]:
    """Return the outbox row's form of `job` (with the rule that accepted its queue, if any)."""
    payload: dict[str, Any] = {"job": job.to_dict(), "delay_ms": job.delay_ms}
    if queue_accepted_by:
        payload["queue_accepted_by"] = queue_accepted_by
    return payload


def from_outbox(payload: dict[str, Any]) -> Job:
    """Return the job an outbox row holds."""
    job = Job.from_dict(payload["job"])
    job.delay_ms = payload.get("delay_ms")
    return job


def _submit(jobs: list[Job], flow: bool, again: bool) -> list[Job]:
    """Submit checked jobs from sync code on the caller's thread (no hop to another loop)."""
    client = engineloop.sync_client(engine_settings())
    try:
        return client.enqueue_flow(jobs) if flow else client.enqueue_many(jobs)
    except DuplicateJob:
        if not again:
            raise
        log.info("push found jobs already submitted count=%d", len(jobs))
        return jobs


async def _asubmit(jobs: list[Job], flow: bool, again: bool) -> list[Job]:
    """Submit checked jobs on the caller's own loop (engineloop.loop_client: no hop)."""
    client = engineloop.loop_client(engine_settings())
    try:
        return await (client.enqueue_flow(jobs) if flow else client.enqueue_many(jobs))
    except DuplicateJob:
        if not again:
            raise
        log.info("push found jobs already submitted count=%d", len(jobs))
        return jobs


def admit(
    jobs: list[Job],
    *,
    flow: bool = False,
    outbox: bool = False,
    again: bool = False,
    by: Actor | None = None,
    queue_accepted_by: str = "",
    check_types: bool | None = None,
) -> list[Job]:
    """Check `jobs`, then run, outbox or submit them; return them as submitted.

    `flow` submits all or nothing; `outbox` inside transaction.atomic() writes outbox rows that
    reach Redis after the commit (none on a rollback); `again` pushes jobs admitted before (the
    outbox relay, reconciliation): ids already in Redis count as submitted, and eager mode and
    the outbox do not apply. `queue_accepted_by` names the caller's own queue rule that
    accepted the jobs' queues (the django.tasks backend's QUEUES); JOBSITE["QUEUES"] then does
    not decide, every other check still runs. `check_types` checks the arguments against their
    tasks' type hints (None: when JOBSITE["CHECK_ARGUMENT_TYPES"] is on; the API: always).
    """
    chosen = _check(with_callbacks(jobs), flow, queue_accepted_by, again, check_types)
    if chosen:
        _held_elsewhere(chosen, list(_rows(chosen)))
    if not again and _eager():
        done = [_run_inline(job) for job in jobs]
    elif not again and outbox and transaction.get_connection().in_atomic_block:
        OutboxEntry.objects.bulk_create(
            OutboxEntry(job_id=job.id, queue=job.queue, job=outbox_payload(job, queue_accepted_by))
            for job in jobs
        )
        ids = [job.id for job in jobs]
        transaction.on_commit(lambda: push_outbox(ids), robust=True)
        done = jobs
    else:
        done = _submit(jobs, flow, again)
    _record(done, by, flow)
    return done


async def aadmit(
    jobs: list[Job],
    *,
    flow: bool = False,
    again: bool = False,
    by: Actor | None = None,
    queue_accepted_by: str = "",
    check_types: bool | None = None,
) -> list[Job]:
    """Async twin of `admit` (no transaction here: the jobs reach Redis at once)."""
    chosen = _check(with_callbacks(jobs), flow, queue_accepted_by, again, check_types)
    if chosen:
        _held_elsewhere(chosen, [row async for row in _rows(chosen)])
    if not again and _eager():
        done = [await sync_to_async(_run_inline)(job) for job in jobs]
    else:
        done = await _asubmit(jobs, flow, again)
    if by is not None:
        await sync_to_async(_record)(done, by, flow)
    return done


def push_outbox(job_ids: list[str] | None = None, older_than_s: float = 0.0) -> int:
    """Push committed outbox rows that have not reached Redis; return how many were pushed.

    Rows whose queue a caller's own rule accepted (the django.tasks backend's QUEUES) are
    admitted again under that rule, the others under JOBSITE["QUEUES"].
    """
    rows = OutboxEntry.objects.filter(pushed_at__isnull=True)
    if job_ids is not None:
        rows = rows.filter(job_id__in=list(job_ids))
    if older_than_s:
        rows = rows.filter(created_at__lte=timezone.now() - timedelta(seconds=older_than_s))
    by_rule: dict[str, list[OutboxEntry]] = {}
    for entry in rows.order_by("id")[:1000]:
        by_rule.setdefault(str(entry.job.get("queue_accepted_by", "")), []).append(entry)
    pushed: list[OutboxEntry] = []
    for rule, entries in by_rule.items():
        jobs = [from_outbox(e.job) for e in entries]
        try:
            admit(jobs, again=True, queue_accepted_by=rule)
        except JobIdTaken as exc:  # taken by another queue since its commit: it can never go
            refused = set(exc.ids)
            log.error("outbox dropped jobs whose ids another queue took ids=%s", ",".join(exc.ids))
            OutboxEntry.objects.filter(job_id__in=refused, pushed_at__isnull=True).delete()
            entries = [e for e in entries if e.job_id not in refused]
            if entries:
                admit([j for j in jobs if j.id not in refused], again=True, queue_accepted_by=rule)
        pushed += entries
    OutboxEntry.objects.filter(id__in=[e.id for e in pushed]).update(pushed_at=timezone.now())
    return len(pushed)
