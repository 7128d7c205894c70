"""Retention of the history: rows of jobs that ended long enough ago are deleted in small batches.

`JOBSITE["JOB_RETENTION_DAYS"]` (default 30; None keeps everything) applies to every state,
`JOBSITE["JOB_RETENTION_DAYS_BY_STATE"]` overrides it per state (default: failures 90 days).
The mirror applies the same rule to what it writes, so an event replayed after its job was
pruned never brings the row back (see `Horizon.keeps`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from engine import ConfigError
from jobsite.jobs import conf
from jobsite.jobs.models import (
    STATE_CHOICES,
    VOCABULARY,
    JobRecord,
    JobSearch,
    QueueDepth,
    RollupCount,
)

log = logging.getLogger("jobsite.retention")
ENDED = frozenset(VOCABULARY["ended"])
# How long the charts' finer slots and depth samples are kept (the chart that reads them spans
# an hour, a day, a week; /stats reads up to a day of minutes); hourly slots follow the history.
ROLLUP_KEPT = {60: timedelta(days=2), 900: timedelta(days=8)}
DEPTH_KEPT = timedelta(days=8)


def _days(value: object, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"JOBSITE[{name!r}] must be a positive number of days or None")
    return float(value)


@dataclass(frozen=True)
class Horizon:
    """The oldest end time kept, per state, as of `now` (None: kept forever)."""

    cutoffs: dict[str, datetime | None]

    @classmethod
    def now(cls, at: datetime | None = None) -> Horizon:
        """Return the horizon of the configured retention at `at` (default: now)."""
        at = at or timezone.now()
        default = _days(conf.option("JOB_RETENTION_DAYS"), "JOB_RETENTION_DAYS")
        overrides = conf.option("JOB_RETENTION_DAYS_BY_STATE")
        if not isinstance(overrides, dict) or set(overrides) - {s for s, _ in STATE_CHOICES}:
            raise ConfigError("JOBSITE['JOB_RETENTION_DAYS_BY_STATE'] must map job states to days")
        cutoffs: dict[str, datetime | None] = {}
        for state in ENDED:
            days = _days(overrides[state], state) if state in overrides else default
            cutoffs[state] = None if days is None else at - timedelta(days=days)
        return cls(cutoffs)

    def newest_cutoff(self) -> datetime | None:
        """Return the most recent cutoff: anything ended before it is pruned, whatever its state."""
        found = [c for c in self.cutoffs.values() if c is not None]
        return max(found) if len(found) == len(self.cutoffs) else None

    def oldest_cutoff(self) -> datetime | None:
        """Return the oldest cutoff: rollup minutes before it belong to no kept job."""
        found = [c for c in self.cutoffs.values() if c is not None]
        return min(found) if len(found) == len(self.cutoffs) else None

    def keeps(self, state: str, ended_at: datetime | None, seen_at: datetime) -> bool:
        """Tell whether a row in `state` belongs in the history (False: it would be pruned).

        An ended row is judged by its end time; a live row by the time of its event, against
        the newest cutoff: a job pruned as ended had all its earlier events before that.
        """
        if state in ENDED:
            cutoff = self.cutoffs[state]
            return cutoff is None or (ended_at or seen_at) >= cutoff
        newest = self.newest_cutoff()
        return newest is None or seen_at >= newest


def prune(batch: int = 2000, batches: int = 10, at: datetime | None = None) -> int:
    """Delete at most `batches` x `batch` ended jobs per state past retention, with their events.

    Each batch is its own short transaction, found through the (state, submitted_at) index
    (a job that ended before the cutoff was submitted before it too).
    Returns the number of jobs deleted; call again while it returns the full amount.
    """
    horizon = Horizon.now(at)
    deleted = 0
    for state, cutoff in sorted(horizon.cutoffs.items()):
        if cutoff is None:
            continue
        old = JobRecord.objects.filter(
            state=state, submitted_at__lt=cutoff, completed_at__lt=cutoff
        ).order_by("submitted_at")
        for _ in range(batches):
            ids = list(old.values_list("id", flat=True)[:batch])
            if not ids:
                break
            with transaction.atomic():
                JobSearch.objects.filter(job_id__in=ids).delete()
                deleted += JobRecord.objects.filter(id__in=ids).delete()[0]
            if len(ids) < batch:
                break
    prune_rollup(horizon, at or timezone.now())
    if deleted:
        log.info("pruned history jobs=%d", deleted)
    return deleted


def prune_rollup(horizon: Horizon, at: datetime) -> None:
    """Delete rollup slots and depth samples older than their span keeps them."""
    for span_s, kept in ROLLUP_KEPT.items():
        RollupCount.objects.filter(span_s=span_s, start__lt=at - kept).delete()
    oldest = horizon.oldest_cutoff()
    if oldest is not None:  # hourly slots: as long as the history, and at least the week chart
        cutoff = min(oldest, at - DEPTH_KEPT)
        RollupCount.objects.filter(span_s__gt=max(ROLLUP_KEPT), start__lt=cutoff).delete()
    QueueDepth.objects.filter(minute__lt=at - DEPTH_KEPT).delete()
