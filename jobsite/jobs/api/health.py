"""GET /health: each queue's verdict and each schedule's state, with the reasons in words,
narrowed to the queues the request may see, and the Redis server's memory and uptime (figures of
the whole server: not for a token narrowed to queues)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest
from ninja import Router

from engine import RedisUnavailable, server_info
from jobsite.jobs import services
from jobsite.jobs.api.schemas import ERRORS, Out
from jobsite.jobs.history import health
from jobsite.jobs.permissions import Perm, aneed

router = Router(tags=["health"])


class QueueHealthOut(Out):
    queue: str
    verdict: str
    reasons: list[str]
    figures: dict[str, float]


class ScheduleHealthOut(Out):
    queue: str
    name: str
    state: str
    reasons: list[str]
    tolerance_s: float
    due_ms: int | None
    last_tick_ms: int | None
    last_job: str | None
    skip_if_running: bool


class RedisOut(Out):
    """The engine's Redis server: memory used and its limit (0 / "no limit": none), uptime."""

    used_memory_bytes: int
    used_memory_human: str
    max_memory_bytes: int
    max_memory_human: str
    uptime_s: int
    version: str
    nodes: int


class HealthOut(Out):
    queues: list[QueueHealthOut]
    schedules: list[ScheduleHealthOut]
    # None while Redis does not answer, and for a token narrowed to queues (server-wide figures).
    redis: RedisOut | None = None


def _health(names: list[str]) -> HealthOut:
    return HealthOut(
        queues=[QueueHealthOut(**q.as_dict()) for q in health.queue_health(names)],
        schedules=[
            ScheduleHealthOut.model_validate(s, from_attributes=True)
            for s in health.schedule_health(names)
        ],
    )


@router.get("", response={200: HealthOut, **ERRORS})
async def get_health(request: HttpRequest, queue: str | None = None) -> HealthOut:
    """Each queue's verdict (ok, recovering, degraded, failing) and each schedule's state (ok,
    missed, late, overlap, no_worker, recovering, paused), with reasons; `queue` picks one.
    `recovering`: no live worker yet, within the grace workers get after a Redis outage (never
    alerted). Redis' memory and uptime are left out (null) for a token narrowed to queues."""
    rights = await aneed(request, Perm.VIEW, queue)
    names = await sync_to_async(health.judged_queues, thread_sensitive=True)()
    names = [q for q in names if (queue is None or q == queue) and rights.allows(Perm.VIEW, q)]
    out = await sync_to_async(_health, thread_sensitive=True)(names)
    if rights.queues is not None:
        return out
    try:
        info = await services.arun_engine(lambda c: server_info(c.redis))
        out.redis = RedisOut(**info.as_dict())
    except RedisUnavailable:
        out.redis = None
    return out
