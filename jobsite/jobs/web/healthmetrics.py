"""The health verdicts as Prometheus gauges: one series per queue and verdict, per schedule and
state, 1 for the current one and 0 for the others (docs/alerts.rules.yml alerts on them)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine import SCHEDULE_STATES as STATES
from engine import ScheduleHealth
from jobsite.jobs.history.health import VERDICTS, QueueHealth


class HealthCollector(Collector):
    """Turn queue verdicts and schedule states into gauge families."""

    def __init__(self, queues: list[QueueHealth], schedules: list[ScheduleHealth]) -> None:
        self.queues = queues
        self.schedules = schedules

    def collect(self) -> Iterator[Metric]:
        """Yield jobsite_queue_health and jobsite_schedule_health."""
        queues = GaugeMetricFamily(
            "jobsite_queue_health",
            "1 for the queue's current verdict (ok, recovering, degraded, failing), 0 for the "
            "others.",
            labels=["queue", "verdict"],
        )
        for q in self.queues:
            for verdict in VERDICTS:
                queues.add_metric([q.queue, verdict], float(q.verdict == verdict))
        yield queues
        schedules = GaugeMetricFamily(
            "jobsite_schedule_health",
            "1 for the schedule's current state (ok, missed, late, overlap, no_worker, "
            "recovering, paused), 0 for the others.",
            labels=["queue", "schedule", "state"],
        )
        for s in self.schedules:
            for state in STATES:
                schedules.add_metric([s.queue, s.name, state], float(s.state == state))
        yield schedules
