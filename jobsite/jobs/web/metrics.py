"""The Prometheus endpoint: the engine's metrics and the outbox, in the text exposition format.

A scrape is allowed with `Authorization: Bearer <JOBSITE["METRICS_TOKEN"]>` (when that option is
set), or authenticated like the API (an API token or a staff session) with
`jobsite.view_jobrecord`; an API token narrowed to some queues sees only those. Each scrape
builds its own registry: nothing is kept between requests, so the numbers are those Redis holds
at that moment. Redis away is a scrape like any other: `jobsite_redis_up 0` and the outbox size
(an alert can fire on it), not a 500.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from engine import Histogram, Metrics, RedisUnavailable
from jobsite.jobs import conf, services
from jobsite.jobs.api.tokens import TokenAuth
from jobsite.jobs.history import health
from jobsite.jobs.models import OutboxEntry
from jobsite.jobs.permissions import Grant, Perm
from jobsite.jobs.web.healthmetrics import HealthCollector

log = logging.getLogger("jobsite.metrics")


@dataclass(frozen=True)
class Access:
    """The verdict on a scrape: its HTTP status, and the queues it may see (None: every one)."""

    status: int
    queues: list[str] | None = None
    reason: str = ""


def access(request: HttpRequest) -> Access:
    """Decide whether `request` may scrape: the metrics token, or an API grant of view_jobrecord."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    key = key.strip()
    rights: Grant | None
    if scheme.lower() == "bearer" and key:
        wanted = str(conf.option("METRICS_TOKEN") or "")
        if wanted and hmac.compare_digest(key.encode(), wanted.encode()):
            return Access(200)
        rights = TokenAuth().authenticate(request, key)
        if rights is None:
            return Access(401, reason="unknown or expired bearer token")
    elif request.user.is_authenticated:
        rights = Grant(request.user)
    else:
        return Access(401, reason="credentials needed: a bearer token or a staff session")
    if not rights.allows(Perm.VIEW):
        return Access(403, reason=f"this needs the permission {Perm.VIEW.full}")
    return Access(200, queues=rights.queues)


def _histogram(family: HistogramMetricFamily, labels: list[str], hist: Histogram) -> None:
    buckets = [(floatToGoString(le), float(n)) for le, n in hist.buckets]
    family.add_metric(labels, buckets, hist.sum_s)


# The per-queue gauges: (name, help, the QueueMetrics attribute they read).
_QUEUE_GAUGES = (
    ("jobsite_queue_dlq_jobs", "Jobs in the dead-letter queue.", "dlq"),
    (
        "jobsite_queue_oldest_waiting_seconds",
        "Age of the oldest ready job (heads of the priority bands); 0 when none.",
        "oldest_waiting_s",
    ),
    (
        "jobsite_mirror_lag_seconds",
        "Age of the oldest event the mirror has not acknowledged; 0 when none.",
        "mirror_lag_s",
    ),
    (
        "jobsite_mirror_backlog",
        "Events the mirror has not acknowledged (undelivered plus pending).",
        "mirror_backlog",
    ),
    ("jobsite_event_stream_length", "Entries in the event stream.", "stream_length"),
    (
        "jobsite_mirror_gap_entries",
        "Events trimmed before the mirror read them (the hard cap was reached), ever.",
        "gap_entries",
    ),
    (
        "jobsite_mirror_gap_rebuilt_jobs",
        "Jobs whose trimmed events the mirror rebuilt from their hashes, ever.",
        "gap_rebuilt",
    ),
    (
        "jobsite_mirror_gap_lost_jobs",
        "Jobs whose trimmed events could not be rebuilt (hash gone), ever.",
        "gap_lost",
    ),
    (
        "jobsite_queue_runnable_jobs",
        "Jobs a worker could claim now (ready, queue not paused; not scheduled, blocked,"
        " waiting for a concurrency key's turn or for their task version).",
        "runnable",
    ),
    (
        "jobsite_queue_oldest_runnable_seconds",
        "Age of the oldest runnable job; 0 when none (scale on this and the next).",
        "oldest_runnable_s",
    ),
    (
        "jobsite_queue_worker_slots",
        "Concurrency of the live workers claiming from the queue.",
        "worker_slots",
    ),
    (
        "jobsite_queue_runnable_per_slot",
        "Runnable jobs per live worker slot (per one slot when there is none).",
        "runnable_per_slot",
    ),
)


class EngineCollector(Collector):
    """Turn one engine snapshot (None: Redis did not answer) and the outbox size into families."""

    def __init__(self, snapshot: Metrics | None, outbox_size: int) -> None:
        self.snapshot = snapshot
        self.outbox_size = outbox_size

    def collect(self) -> Iterator[Metric]:
        """Yield every family, labelled by queue (and task, state); Redis away: up 0, outbox."""
        yield GaugeMetricFamily(
            "jobsite_redis_up",
            "1 when the engine's Redis answered this scrape, 0 when it did not.",
            0 if self.snapshot is None else 1,
        )
        yield GaugeMetricFamily(
            "jobsite_outbox_size",
            "Outbox entries committed but not pushed to Redis yet.",
            self.outbox_size,
        )
        if self.snapshot is not None:
            yield from self._engine(self.snapshot)

    def _engine(self, snapshot: Metrics) -> Iterator[Metric]:
        queues = snapshot.queues
        jobs = CounterMetricFamily(
            "jobsite_jobs",
            "Jobs that reached a terminal state, by queue, task and state.",
            labels=["queue", "task", "state"],
        )
        run = HistogramMetricFamily(
            "jobsite_job_run_seconds",
            "Run time of completed jobs (the attempt that completed).",
            labels=["queue", "task"],
        )
        wait = HistogramMetricFamily(
            "jobsite_job_wait_seconds",
            "Time from becoming ready (submitted) to the start of each attempt.",
            labels=["queue", "task"],
        )
        for q in queues:
            for (task, state), n in sorted(q.jobs.items()):
                jobs.add_metric([q.queue, task, state], n)
            for task, hist in sorted(q.run.items()):
                _histogram(run, [q.queue, task], hist)
            for task, hist in sorted(q.wait.items()):
                _histogram(wait, [q.queue, task], hist)
        yield from (jobs, run, wait)
        depth = GaugeMetricFamily(
            "jobsite_queue_jobs", "Jobs in a queue now, by live state.", labels=["queue", "state"]
        )
        for q in queues:
            for state, n in q.depth.items():
                depth.add_metric([q.queue, state], n)
        yield depth
        yield from self._per_queue(snapshot)
        alive = snapshot.workers_alive
        yield GaugeMetricFamily("jobsite_workers_alive", "Workers with a live liveness key.", alive)

    def _per_queue(self, snapshot: Metrics) -> Iterable[GaugeMetricFamily]:
        for name, doc, attr in _QUEUE_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["queue"])
            for q in snapshot.queues:
                family.add_metric([q.queue], float(getattr(q, attr)))
            yield family
        yield from self._groups(snapshot)
        yield from self._versions(snapshot)

    def _groups(self, snapshot: Metrics) -> Iterable[GaugeMetricFamily]:
        """The lag of each other consumer group of the queues' event streams."""
        backlog = GaugeMetricFamily(
            "jobsite_event_group_backlog",
            "Events a consumer group of the event stream besides the mirror's (the transition"
            " hooks') has not acknowledged; the stream is kept for it.",
            labels=["queue", "group"],
        )
        lag = GaugeMetricFamily(
            "jobsite_event_group_lag_seconds",
            "Age of the oldest event that group has not acknowledged; 0 when none.",
            labels=["queue", "group"],
        )
        for q in snapshot.queues:
            for group, behind in sorted(q.groups.items()):
                backlog.add_metric([q.queue, group], behind.backlog)
                lag.add_metric([q.queue, group], behind.lag_s)
        yield from (backlog, lag)

    def _versions(self, snapshot: Metrics) -> Iterable[GaugeMetricFamily]:
        """The jobs waiting for a worker with their task version."""
        versions = GaugeMetricFamily(
            "jobsite_queue_waiting_for_version",
            "Jobs waiting for a worker with their task version (a rolling deploy).",
            labels=["queue", "task", "version"],
        )
        for q in snapshot.queues:
            for tag, n in sorted(q.waiting_for_version.items()):
                task, _, version = tag.rpartition("@")
                versions.add_metric([q.queue, task, version], n)
        yield versions


def _refused(verdict: Access) -> HttpResponse:
    response = HttpResponse(verdict.reason + "\n", status=verdict.status, content_type="text/plain")
    if verdict.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="jobsite metrics"'
    return response


@require_GET
def scrape(request: HttpRequest) -> HttpResponse:
    """Answer a Prometheus scrape (401 without credentials, 403 without view_jobrecord)."""
    verdict = access(request)
    if verdict.status != 200:
        log.info("metrics scrape refused status=%d reason=%r", verdict.status, verdict.reason)
        return _refused(verdict)
    names = conf.queues()
    if verdict.queues is not None:
        names = [q for q in names if q in verdict.queues]
    snapshot: Metrics | None
    try:
        snapshot = services.metrics_snapshot(names)
    except RedisUnavailable as exc:
        log.warning("metrics scrape without redis error=%s", type(exc).__name__)
        snapshot = None
    outbox = OutboxEntry.objects.filter(pushed_at__isnull=True).count()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(snapshot, outbox))
    if snapshot is not None:  # the verdicts need Redis too
        try:
            judged = health.queue_health(names), health.schedule_health(names)
            registry.register(HealthCollector(*judged))
        except RedisUnavailable as exc:
            log.warning("metrics scrape without health error=%s", type(exc).__name__)
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    response = HttpResponse(encode(registry), content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response
