"""A job as the API answers it: live from Redis or from its history row, with its history."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ninja.errors import HttpError

from engine import Job as EngineJob
from engine import JobState, Task, version_tag
from jobsite.jobs import services
from jobsite.jobs.api import related
from jobsite.jobs.api.schemas import EventOut, JobIn, JobOut, LogLineOut
from jobsite.jobs.models import DEAD, JobRecord
from jobsite.jobs.permissions import Grant, Perm
from jobsite.jobs.tasks import runnable
from jobsite.jobs.tasks.registry import known_tasks


def known_task(name: str) -> Task:
    """Return the registered task `name` (422 naming it when there is none)."""
    task = known_tasks().get(name)
    if task is None:
        raise HttpError(422, f"unknown task {name!r}; see GET /api/v1/tasks")
    return task


async def submittable(rights: Grant, spec: JobIn, where: str, allowed: set[str]) -> Task:
    """Return the task one job names (422 naming `where` when unknown), checking the caller
    may submit to its queue once per queue (`allowed` keeps those seen), with its callbacks
    (on_success, on_failure) checked as the same enqueue in that queue, where they run."""
    try:
        task = known_task(spec.task)
    except HttpError as exc:
        raise HttpError(exc.status_code, f"{where}: {exc}".lstrip(": ")) from None
    queue = spec.queue or task.options.queue
    if queue not in allowed:
        await rights.arequire(Perm.SUBMIT, queue)
        allowed.add(queue)
    chosen: dict[str, Any] = {}
    for name in ("on_success", "on_failure"):
        callback = getattr(spec, name)
        if callback is not None:
            target = JobIn.model_validate({"task": callback.task, "queue": queue})
            checked = await submittable(rights, target, f"{where} {name}".strip(), allowed)
            chosen[name] = (checked, callback.kwargs)
    return task.using(**chosen) if chosen else task


async def live_out[Out: JobOut](job_id: str, queue: str | None, schema: type[Out]) -> Out:
    """Return a job live from Redis, with its history (JobNotFound when Redis has none)."""
    return await out(
        engine_values(await services.arun_engine(lambda c: c.jobs.get(job_id, queue))),
        job_id,
        schema,
    )


def _dt(ms: int | None) -> datetime | None:
    return None if not ms else datetime.fromtimestamp(ms / 1000, tz=UTC)


def engine_values(job: EngineJob) -> dict[str, Any]:
    """Return JobOut fields of a live engine job."""
    values = {f: getattr(job, f, None) for f in JobOut.model_fields if f != "history"}
    values.update(
        state=str(job.state), worker=job.worker or "", progress_message=job.progress_message or ""
    )
    values.update(logs=job.logs, logs_dropped=job.logs_dropped or 0, checkpoint=job.checkpoint)
    values.update(fingerprint=job.fingerprint or "", replay_of=job.replay_of or "")
    aside_ms = job.extra.get("unserved_at_ms")
    if aside_ms:  # waits for a worker with its task version (engine/resources/versions.py)
        values.update(
            waiting_for_version=version_tag(job.task, job.version),
            waiting_for_version_since=_dt(int(aside_ms)),
        )
    for name in (
        "submitted_at",
        "claimed_at",
        "started_at",
        "retried_at",
        "completed_at",
        "run_at",
    ):
        values[name] = _dt(getattr(job, f"{name}_ms"))
    values["max_retries"] = job.options.get("max_retries")
    if job.state is JobState.STARTED:
        values["phase"] = "running" if job.begun == "1" else "claimed"
    return values


def _history(row: JobRecord | None) -> list[EventOut]:
    """Return the state changes the history holds for a job (none when it has no row)."""
    return [
        EventOut(
            at=t["at"],
            from_state=t.get("from", ""),
            to_state=t.get("to", ""),
            attempt=t.get("attempt", 0),
            worker=t.get("worker", ""),
            error=t.get("error", ""),
        )
        for t in (row.timeline() if row is not None else [])
    ]


def _log_lines(raw: Any) -> list[LogLineOut]:
    """Return the well-formed lines of a stored log (anything else is left out)."""
    lines = raw if isinstance(raw, list) else []
    return [
        LogLineOut(at_ms=x["at_ms"], attempt=x["attempt"], message=x["message"])
        for x in lines
        if isinstance(x, dict)
        and isinstance(x.get("at_ms"), int)
        and isinstance(x.get("attempt"), int)
        and isinstance(x.get("message"), str)
    ]


def ended(values: dict[str, Any]) -> dict[str, Any]:
    """Return the fields told by a job's end and its task: failed_at or cancelled_at, the last
    attempt's duration, the retries its task allows, its newest error's message, and why it
    cannot run again (the reason POST /jobs/{id}/retry refuses it with)."""
    state, end = values.get("state"), values.get("completed_at")
    begun = values.get("retried_at") or values.get("started_at")
    errors = values.get("errors") or []
    last = errors[-1] if errors and isinstance(errors[-1], dict) else {}
    task = known_tasks().get(values.get("task") or "")
    retries = values.get("max_retries")
    return {
        "failed_at": end if state in DEAD else None,
        "cancelled_at": end if state == "cancelled" else None,
        "duration_seconds": (end - begun).total_seconds() if end and begun else None,
        "max_retries": retries if retries is not None else task and task.options.max_retries,
        "error": last.get("message"),
        "cannot_run": runnable.why_not(values.get("task") or "", errors),
    }


def fields(schema: type[JobOut], values: dict[str, Any]) -> dict[str, Any]:
    """Return the values `schema` takes, its log lines checked."""
    values = {**values, **ended(values)}
    taken = {k: v for k, v in values.items() if k in schema.model_fields}
    if "logs" in taken:
        taken["logs"] = _log_lines(taken["logs"])
    return taken


async def out[Out: JobOut](values: dict[str, Any], job_id: str, schema: type[Out]) -> Out:
    """Return a job of `values` (a live job's) with the history of its row."""
    row = await JobRecord.objects.filter(id=job_id).only("transitions").afirst()
    return schema(**fields(schema, values), history=_history(row))


async def row_out[Out: JobOut](row: JobRecord, schema: type[Out]) -> Out:
    """Return a job the history alone holds."""
    wanted = [f for f in schema.model_fields if f not in related.GRAPH]
    values = {f: getattr(row, f) for f in wanted if hasattr(row, f)}
    return schema(**fields(schema, values), history=_history(row))
