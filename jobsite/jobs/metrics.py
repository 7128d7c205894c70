"""The Prometheus endpoint: the engine's metrics and the outbox, in the text exposition format.

A scrape is allowed with `Authorization: Bearer <JOBSITE["METRICS_TOKEN"]>` (when that option is
set), or authenticated like the API (an API token or a staff session) with
`jobsite.view_jobrecord`; an API token narrowed to some queues sees only those. Each scrape
builds its own registry: nothing is kept between requests, so the numbers are those Redis holds
at that moment.
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

from engine import Histogram, Metrics

from . import conf, health, services
from .healthmetrics import HealthCollector
from .models import OutboxEntry
from .permissions import Grant, Perm
from .tokens import TokenAuth

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


class EngineCollector(Collector):
    """Turn one engine snapshot and the outbox size into metric families."""

    def __init__(self, snapshot: Metrics, outbox_size: int) -> None:
        self.snapshot = snapshot
        self.outbox_size = outbox_size

    def collect(self) -> Iterator[Metric]:
        """Yield every family, labelled by queue (and task, state)."""
        queues = self.snapshot.queues
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
        yield from self._per_queue()
        alive = self.snapshot.workers_alive
        yield GaugeMetricFamily("jobsite_workers_alive", "Workers with a live liveness key.", alive)
        yield GaugeMetricFamily(
            "jobsite_outbox_size",
            "Outbox entries committed but not pushed to Redis yet.",
            self.outbox_size,
        )

    def _per_queue(self) -> Iterable[GaugeMetricFamily]:
        rows = (
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
        )
        for name, doc, attr in rows:
            family = GaugeMetricFamily(name, doc, labels=["queue"])
            for q in self.snapshot.queues:
                family.add_metric([q.queue], float(getattr(q, attr)))
            yield family


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
    snapshot = services.metrics_snapshot(names)
    outbox = OutboxEntry.objects.filter(pushed_at__isnull=True).count()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(snapshot, outbox))
    registry.register(HealthCollector(health.queue_health(names), health.schedule_health(names)))
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    response = HttpResponse(encode(registry), content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response
