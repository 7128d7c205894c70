"""A job's graph for its detail: parents, children and the whole flow, with their states.

The job's own links come with it (`links`); the history finds a flow with one indexed query
(JobRecord.flow_id); Redis, the source of truth for live jobs, gives the current state of each
and fills in parents the mirror has not written yet. A flow stays in one queue, so the job's
queue is the only one read.
"""

from __future__ import annotations

from typing import Any

from jobsite.jobs import services
from jobsite.jobs.api.schemas import JobDetailOut, RelatedOut
from jobsite.jobs.models import JobRecord

# Most jobs of one flow a detail shows.
FLOW_CAP = 200
_FIELDS = ("task", "state", "parents", "flow_id", "runs_on")
# The detail's fields that afill fills (a row's `parents` are ids, the detail's are jobs).
GRAPH = frozenset(("flow_id", "parents", "children", "flow"))


def _ids(raw: Any) -> list[str]:
    return [p for p in raw if isinstance(p, str)] if isinstance(raw, list) else []


async def _nodes(job_id: str, flow_id: str | None, parents: list[str]) -> dict[str, RelatedOut]:
    """Return the history's rows of the flow (or of the parents, outside a flow) by id."""
    rows = JobRecord.objects.only("id", "task", "state", "parents")
    if flow_id:
        rows = rows.filter(flow_id=flow_id).order_by("submitted_at", "id")[:FLOW_CAP]
    else:
        rows = rows.filter(id__in=[job_id, *parents])
    return {
        r.id: RelatedOut(id=r.id, task=r.task, state=r.state, parents=_ids(r.parents))
        async for r in rows
    }


async def _refresh(queue: str, nodes: dict[str, RelatedOut], wanted: list[str]) -> None:
    """Overlay Redis's states on `nodes` and add the `wanted` ids the history lacks."""
    ids = list(dict.fromkeys([*nodes, *wanted]))
    for job_id, live in zip(ids, await services.ajob_fields(queue, ids, _FIELDS), strict=True):
        if not live:
            continue
        node = nodes.get(job_id)
        if node is None:
            node = nodes[job_id] = RelatedOut(id=job_id, task=live.get("task", ""), state="")
            node.parents = _ids(live.get("parents"))
        node.state = live.get("state") or node.state
        node.runs_on = live.get("runs_on") or node.runs_on


async def refreshed(queue: str, rows: list[Any]) -> list[RelatedOut]:
    """Return the history's rows of one flow as nodes, with Redis's states laid over them."""
    nodes = {
        r.id: RelatedOut(id=r.id, task=r.task, state=r.state, parents=_ids(r.parents)) for r in rows
    }
    await _refresh(queue, nodes, [])
    return list(nodes.values())


def links(raw: Any) -> tuple[str | None, list[str]]:
    """Return the flow id and parent ids of a job (an engine Job or a history row)."""
    return getattr(raw, "flow_id", None) or None, _ids(getattr(raw, "parents", None))


async def afill(detail: JobDetailOut, flow_id: str | None, parents: list[str]) -> JobDetailOut:
    """Fill the detail's flow_id, parents, children and flow (from the job's own `links`)."""
    if not flow_id and not parents:
        return detail
    nodes = await _nodes(detail.id, flow_id, parents)
    await _refresh(detail.queue, nodes, [detail.id, *parents])
    detail.flow_id = flow_id
    detail.parents = [nodes[p] for p in parents if p in nodes]
    detail.children = [n for n in nodes.values() if detail.id in n.parents]
    detail.flow = list(nodes.values()) if flow_id else []
    return detail
