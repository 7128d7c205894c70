"""POST /flows: a graph of jobs linked by `depends_on`, submitted all or nothing.

Every job is checked (task, permission on its queue, arguments, options) and the graph too
(unique refs, no cycle, one queue) before anything reaches Redis; the engine then writes the
whole flow in one script call, or nothing (an unknown parent, an id that exists).
"""

from __future__ import annotations

import graphlib
from datetime import datetime
from typing import Literal

from asgiref.sync import sync_to_async
from django.db.models import Count, Min
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError
from pydantic import ConfigDict

from engine import ConfigError, InvalidArguments, Job, UnknownParent, check_arguments
from jobsite.jobs import services
from jobsite.jobs.api import options as taskoptions
from jobsite.jobs.api.jobout import submittable
from jobsite.jobs.api.options import REF_PATTERN
from jobsite.jobs.api.related import FLOW_CAP, refreshed
from jobsite.jobs.api.schemas import ERRORS, JobIn, Out, RelatedOut
from jobsite.jobs.models import FlowName, JobRecord
from jobsite.jobs.permissions import Grant, Perm, aneed, grant

router = Router(tags=["flows"])


class FlowJobIn(JobIn):
    """One job of a flow: `ref` names it inside the flow; `depends_on` lists refs of this
    flow (or ids of jobs already in the queue)."""

    ref: str = Field(..., pattern=REF_PATTERN)


class FlowIn(Schema):
    model_config = ConfigDict(extra="forbid")

    jobs: list[FlowJobIn] = Field(..., min_length=1, max_length=1000)
    # What people call the flow: shown on the Flows page and in the API's answers, searchable.
    name: str | None = Field(None, min_length=1, max_length=200)
    # What a parent's failure does to jobs that do not say (wait: stay blocked, inspectable).
    on_parent_failure: Literal["wait", "fail", "cancel"] | None = None


class FlowJobOut(Out):
    ref: str
    id: str
    task: str
    queue: str
    state: str
    parents: list[str]


class FlowOut(Out):
    flow_id: str | None
    name: str | None = None
    jobs: list[FlowJobOut]


def _order(jobs: list[FlowJobIn]) -> list[FlowJobIn]:
    """Return the jobs parents first; 422 for a ref used twice, a self-reference or a cycle."""
    by_ref: dict[str, FlowJobIn] = {}
    for job in jobs:
        if job.ref in by_ref:
            raise HttpError(422, f"ref {job.ref!r} names two jobs of the flow")
        by_ref[job.ref] = job
        if job.ref in (job.depends_on or []):
            raise HttpError(422, f"job {job.ref!r} depends on itself")
    graph = {j.ref: [p for p in j.depends_on or [] if p in by_ref] for j in jobs}
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise HttpError(422, f"depends_on forms a cycle: {' -> '.join(exc.args[1])}") from None
    return [by_ref[ref] for ref in order]


async def build_flow(rights: Grant, body: FlowIn) -> tuple[list[Job], dict[int, str]]:
    """Return the flow's unsubmitted jobs (parents first) and the ref of each (by identity:
    a deduplicated job takes its holder's id)."""
    ids: dict[str, str] = {}
    refs: dict[int, str] = {}
    allowed: set[str] = set()
    jobs: list[Job] = []
    for spec in _order(body.jobs):
        where = f"job {spec.ref!r}"
        task = await submittable(rights, spec, where, allowed)
        if spec.on_parent_failure is None and body.on_parent_failure is not None:
            spec = spec.model_copy(update={"on_parent_failure": body.on_parent_failure})
        parents = [ids.get(p, p) for p in spec.depends_on or []]
        try:
            # Checked here too, to name the flow's job in the answer; the gate checks again.
            check_arguments(task, spec.args, spec.kwargs)
            job = taskoptions.apply(task, spec, parents).call(*spec.args, **spec.kwargs)
        except (ConfigError, InvalidArguments, taskoptions.BadOptions) as exc:
            raise HttpError(422, f"{where}: {exc}") from None
        ids[spec.ref] = job.id
        refs[id(job)] = spec.ref
        jobs.append(job)
    if len({job.queue for job in jobs}) > 1:
        raise HttpError(422, "a flow stays in one queue: give every job the same queue")
    return jobs, refs


@router.post("", response={201: FlowOut, **ERRORS})
async def submit_flow(request: HttpRequest, body: FlowIn) -> Status[FlowOut]:
    """Submit a graph of jobs atomically: all are written, or none (422/409 say why)."""
    rights = await aneed(request, Perm.SUBMIT)
    jobs, refs = await build_flow(rights, body)
    try:
        by = services.Actor(rights.user, rights.via)
        done = await services.aadmit(jobs, flow=True, by=by, check_types=True)
    except UnknownParent as exc:
        raise HttpError(
            422, f"{exc}: depends_on takes refs of this flow or ids of queued jobs"
        ) from None
    out = [
        FlowJobOut(
            ref=refs[id(j)],
            id=j.id,
            task=j.task,
            queue=j.queue,
            state=str(j.state),
            parents=j.parents,
        )
        for j in done
    ]
    position = {spec.ref: i for i, spec in enumerate(body.jobs)}
    out.sort(key=lambda j: position[j.ref])  # in the order the caller gave
    flow_id = done[0].flow_id
    if body.name and flow_id:
        await FlowName.objects.aupdate_or_create(flow_id=flow_id, defaults={"name": body.name})
    return Status(201, FlowOut(flow_id=flow_id, name=body.name, jobs=out))


class FlowSummaryOut(Out):
    """A flow as the history holds it: its queue, its jobs per state, when it was submitted."""

    flow_id: str
    name: str | None = None
    queue: str
    jobs: int
    states: dict[str, int]
    submitted_at: datetime | None


class FlowDetailOut(FlowSummaryOut):
    """A flow with every job's state (live from Redis while it has them) and its parents."""

    graph: list[RelatedOut]


def _summaries(
    rights: Grant, queue: str | None, name: str | None, limit: int
) -> list[FlowSummaryOut]:
    rows = rights.narrow(JobRecord.objects.filter(flow_id__isnull=False))
    if queue:
        rows = rows.filter(queue=queue)
    if name:
        named = FlowName.objects.filter(name__icontains=name).values("flow_id")
        rows = rows.filter(flow_id__in=named)
    flows = list(
        rows.values("flow_id", "queue")
        .annotate(jobs=Count("id"), submitted_at=Min("submitted_at"))
        .order_by("-submitted_at", "flow_id")[:limit]
    )
    states: dict[str, dict[str, int]] = {f["flow_id"]: {} for f in flows}
    counted = rows.filter(flow_id__in=list(states)).values("flow_id", "state")
    for row in counted.annotate(n=Count("id")).order_by():
        states[row["flow_id"]][row["state"]] = row["n"]
    names = dict(FlowName.objects.filter(flow_id__in=list(states)).values_list("flow_id", "name"))
    return [
        FlowSummaryOut(**f, name=names.get(f["flow_id"]), states=states[f["flow_id"]])
        for f in flows
    ]


@router.get("", response={200: list[FlowSummaryOut], **ERRORS})
async def list_flows(
    request: HttpRequest,
    queue: str | None = None,
    name: str | None = None,
    limit: int = Query(50, ge=1, le=500),  # type: ignore[type-arg]
) -> list[FlowSummaryOut]:
    """List the newest flows of the queues the caller may see, with their jobs per state;
    `name` keeps the flows whose name holds it (any case)."""
    await aneed(request, Perm.VIEW, queue)
    return await sync_to_async(_summaries)(grant(request), queue, name, limit)


@router.get("/{flow_id}", response={200: FlowDetailOut, **ERRORS})
async def get_flow(request: HttpRequest, flow_id: str) -> FlowDetailOut:
    """Return one flow by its id with every job's state (at most FLOW_CAP jobs)."""
    rights = await aneed(request, Perm.VIEW)
    rows = [
        r
        async for r in JobRecord.objects.filter(flow_id=flow_id)
        .only("id", "queue", "task", "state", "parents", "submitted_at")
        .order_by("submitted_at", "id")[:FLOW_CAP]
    ]
    if not rows or not rights.allows(Perm.VIEW, rows[0].queue):
        raise HttpError(404, f"no flow with id {flow_id!r}")
    queue = rows[0].queue  # a flow stays in one queue
    graph = _parents_first(await refreshed(queue, rows))
    named = await FlowName.objects.filter(flow_id=flow_id).afirst()
    states: dict[str, int] = {}
    for node in graph:
        states[node.state] = states.get(node.state, 0) + 1
    return FlowDetailOut(
        flow_id=flow_id,
        name=named.name if named else None,
        queue=queue,
        jobs=len(graph),
        states=states,
        submitted_at=min((r.submitted_at for r in rows if r.submitted_at), default=None),
        graph=graph,
    )


def _parents_first(graph: list[RelatedOut]) -> list[RelatedOut]:
    """Return the flow's jobs parents first (as submitted where the graph leaves a choice)."""
    position = {node.id: i for i, node in enumerate(graph)}
    order = graphlib.TopologicalSorter(
        {node.id: [p for p in node.parents if p in position] for node in graph}
    )
    order.prepare()
    out: list[str] = []
    while order.is_active():
        ready = sorted(order.get_ready(), key=position.__getitem__)
        out += ready
        order.done(*ready)
    return [graph[position[i]] for i in out]
