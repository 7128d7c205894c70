"""The workers resource (/workers): the live workers, and POST /workers/control to quiet, resume
or stop one worker, or every worker of a host or queue.

Control is behind Perm.CONTROL_WORKER; a token limited to queues may order only workers that
serve none but those queues. Audited: one entry per worker told.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Field, Router
from ninja.errors import HttpError

from engine import ConfigError, control
from jobsite.jobs import audit, services
from jobsite.jobs.api.schemas import ERRORS, QUEUE, Out, WorkerOut
from jobsite.jobs.models import WorkerRecord
from jobsite.jobs.permissions import Grant, Perm, aneed

router = Router(tags=["workers"])


def worker_out(worker: Mapping[str, Any]) -> WorkerOut:
    """Return a registry entry (narrowed) as the API shows it: its outcomes summed over its
    queues."""
    outcomes = worker.get("outcomes", {}).values()
    return WorkerOut(
        **{k: worker[k] for k in WorkerOut.model_fields if k in worker},
        completed=sum(int(n.get("completed", 0)) for n in outcomes),
        failed=sum(int(n.get("failed", 0)) for n in outcomes),
    )


@router.get("", response={200: list[WorkerOut], **ERRORS})
async def workers(request: HttpRequest) -> list[WorkerOut]:
    """Live workers: what each runs, its state, memory, outcomes and task versions."""
    rights = await aneed(request, Perm.VIEW)
    return [
        worker_out(w)
        for w in rights.narrow_workers(await services.arun_engine(lambda c: c.workers.list()))
    ]


class ControlIn(Out):
    """An order and exactly one of: a worker id, a host, a queue."""

    action: Literal["quiet", "resume", "stop"]
    worker: str | None = None
    host: str | None = None
    queue: str | None = Field(None, pattern=QUEUE)


class ControlOut(Out):
    action: str
    workers: list[str]


def _check_scope(rights: Grant, chosen: list[Mapping[str, Any]]) -> None:
    """Refuse (403) when a chosen worker serves a queue outside the request's scope."""
    for w in chosen:
        for queue in str(w.get("queues", "")).split(","):
            if queue and not rights.allows(Perm.CONTROL_WORKER, queue):
                raise HttpError(403, f"worker {w['id']} serves queue {queue!r}, out of scope")


@router.post("/control", response={200: ControlOut, **ERRORS})
async def control_workers(request: HttpRequest, body: ControlIn) -> ControlOut:
    """Quiet (stop claiming, finish what runs), resume or stop (gracefully) workers."""
    rights = await aneed(request, Perm.CONTROL_WORKER, body.queue)
    try:
        chosen = control.select(
            await services.arun_engine(lambda c: c.workers.list()),
            worker=body.worker,
            host=body.host,
            queue=body.queue,
        )
    except ConfigError as exc:
        raise HttpError(422, str(exc)) from None
    if body.worker is not None and not chosen:
        raise HttpError(404, f"no live worker {body.worker!r}")
    await sync_to_async(_check_scope)(rights, chosen)
    order = control.order(body.action)
    told = await services.arun_engine(lambda c: c.workers.send(order, chosen))
    await audit.arecord(rights.user, f"worker {body.action}", told, rights.via, model=WorkerRecord)
    return ControlOut(action=body.action, workers=told)
