"""Health: a verdict per queue, a dead-man's switch per schedule, and a signal per change.

Queue verdicts are `ok`, `degraded` or `failing` (or `recovering`, below), with the reasons in
words:
- no live worker serves it: `failing` while jobs wait in it, else `degraded` for a configured
  queue (JOBSITE["QUEUES"]);
- its oldest runnable job waited longer than OLDEST_WAITING_S;
- a task fails far more than over its own last day: in the last FAILURE_WINDOW_S at least
  FAILURE_MIN_JOBS ended and the share that failed is at least FAILURE_RATE_FACTOR times, and
  FAILURE_RATE_MARGIN above, its share over the day before (the charts' rollup);
- its dead-letter queue grew by DLQ_GROWTH or more within DLQ_WINDOW_S, not counting the dead
  letters of its muted groups (services/mutes.py) that died within that window; the reason
  and the figures (`dlq_muted`, `dlq_growth_muted`) say how many are muted;
- the mirror, or another consumer group of its event stream read lately (the transition
  hooks'), is more than MIRROR_LAG_S behind.
Schedule states come from engine/periodic/schedule_health.py (tolerance: the schedule's, else
SCHEDULE_TOLERANCE_S).

After Redis was away (engine/periodic/outages.py: this process's calls failed, or Redis
restarted), every worker's beats were late: for the grace workers get to renew (`grace_ms`), a
queue served before the outage with no live worker is `recovering`, and so is a schedule whose
tick or run the outage delayed. `recovering` is never recorded nor signalled: the state before
the outage stands until the grace ends, then the queue is judged as ever (workers that really
died are alerted then).

Thresholds are JOBSITE["HEALTH"] keys (DEFAULTS), and per queue under its "QUEUES" key:
`{"HEALTH": {"OLDEST_WAITING_S": 60, "QUEUES": {"emails": {"OLDEST_WAITING_S": 600}}}}`.

`check()` (runworker's `health` loop, every INTERVAL_S) records each state but `recovering` in
Redis (SET ... GET) and, for each change, sends `queue_health_changed` or
`schedule_health_changed` and hands the alert to alerts.py (mail_admins, webhook): once per
change across all processes.
A first look at a state that is fine is no change.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db.models import Sum
from django.utils import timezone

from engine import (
    ConfigError,
    Metrics,
    OutageWatch,
    QueueMetrics,
    Recovery,
    RedisUnavailable,
    ScheduleHealth,
    recent_outages,
    recovery_grace_ms,
    sample_dlq,
    swap_state,
)
from engine import schedule_health as engine_schedule_health
from jobsite.jobs import conf, services
from jobsite.jobs.history import alerts
from jobsite.jobs.history.deadletters import MutedDead, muted_dead
from jobsite.jobs.models import RollupCount
from jobsite.jobs.services import mutes
from jobsite.jobs.tasks.signals import queue_health_changed, schedule_health_changed

log = logging.getLogger("jobsite.health")

DEFAULTS: dict[str, Any] = {
    "INTERVAL_S": 5.0,
    "SCHEDULE_TOLERANCE_S": 60.0,
    "OLDEST_WAITING_S": 300.0,
    "FAILURE_WINDOW_S": 900.0,
    "FAILURE_MIN_JOBS": 10,
    "FAILURE_RATE_FACTOR": 3.0,
    "FAILURE_RATE_MARGIN": 0.25,
    "DLQ_GROWTH": 10,
    "DLQ_WINDOW_S": 300.0,
    "MIRROR_LAG_S": 60.0,
    # After Redis was away, how long a queue or schedule without a live worker is `recovering`
    # (not alerted); never less than the engine's own (outages.recovery_grace_ms); 0: that.
    "RECOVERY_GRACE_S": 0.0,
    # Alerts (alerts.py): mail the ADMINS, and POST to a webhook signed with its secret.
    "MAIL_ADMINS": False,
    "WEBHOOK_URL": "",
    "WEBHOOK_SECRET": "",
    "WEBHOOK_ATTEMPTS": 6,
    "WEBHOOK_BACKOFF_S": 1.0,
    "WEBHOOK_TIMEOUT_S": 5.0,
}
VERDICTS = ("ok", "recovering", "degraded", "failing")
# What this process saw of each Redis it checks (engine/periodic/outages.py), by URL and prefix.
_WATCHES: dict[tuple[str, str], OutageWatch] = {}


# What each key's value must be, by the type of its default.
_KINDS = {
    bool: "true or false",
    str: "a string",
    int: "a whole number >= 0",
    float: "a number >= 0",
}


def _checked(values: Any, where: str) -> dict[str, Any]:
    """Return `values` (a dict of HEALTH keys) if each key is known and its value of its
    default's type (numbers not negative); raise ConfigError naming the first that is not."""
    if not isinstance(values, dict):
        raise ConfigError(f"{where} must be a dict, got {values!r}")
    unknown = set(values) - set(DEFAULTS)
    if unknown:
        raise ConfigError(f"unknown {where} keys: {sorted(unknown)}")
    for key, value in values.items():
        kind = type(DEFAULTS[key])
        number = isinstance(value, int | float) and not isinstance(value, bool)
        fits = {
            bool: isinstance(value, bool),
            str: isinstance(value, str),
            int: number and isinstance(value, int) and value >= 0,
            float: number and value >= 0,
        }[kind]
        if not fits:
            raise ConfigError(f"{where}[{key!r}] must be {_KINDS[kind]}, got {value!r}")
    return dict(values)


def settings(queue: str | None = None) -> dict[str, Any]:
    """Return the health settings, with `queue`'s own thresholds over the defaults; raise
    ConfigError for an unknown key or a value of the wrong type (manage.py check: E009)."""
    given = dict(conf.option("HEALTH") or {})
    queues = given.pop("QUEUES", None) or {}
    given = _checked(given, 'JOBSITE["HEALTH"]')
    if not isinstance(queues, dict):
        raise ConfigError(f'JOBSITE["HEALTH"]["QUEUES"] must be a dict, got {queues!r}')
    per_queue = {
        name: _checked(values, f'JOBSITE["HEALTH"]["QUEUES"][{name!r}]')
        for name, values in queues.items()
    }
    return DEFAULTS | given | (per_queue.get(queue, {}) if queue else {})


def grace_ms() -> int:
    """Return how long after a Redis outage "no live worker" is `recovering`: RECOVERY_GRACE_S,
    never less than the engine's liveness window, heartbeat interval and reconnect."""
    floor_ms = recovery_grace_ms(conf.engine_settings())
    return max(floor_ms, round(float(settings()["RECOVERY_GRACE_S"]) * 1000))


def _watch() -> OutageWatch:
    s = conf.engine_settings()
    return _WATCHES.setdefault((s.redis_url, s.prefix), OutageWatch())


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """A queue's verdict, the reasons in words, and the figures it was judged on."""

    queue: str
    verdict: str
    reasons: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Return it as JSON-ready values."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class TaskRates:
    """A task's failures and ends in the recent window and over the day before it."""

    failed: int
    ended: int
    day_failed: int
    day_ended: int

    @property
    def rate(self) -> float:
        return self.failed / self.ended if self.ended else 0.0

    @property
    def day_rate(self) -> float:
        return self.day_failed / self.day_ended if self.day_ended else 0.0


def task_rates(queue: str, window_s: float) -> dict[str, TaskRates]:
    """Return each task's failed and ended (failed + completed) counts from the rollup: the last
    `window_s` (1-minute slots) and the day before it (hourly slots, the window taken out)."""
    now = timezone.now()

    def counts(span_s: int, since: Any) -> dict[tuple[str, str], int]:
        rows = (
            RollupCount.objects.filter(
                span_s=span_s,
                start__gte=since,
                queue=queue,
                series__in=("failed", "completed"),
                bucket=0,
            )
            .exclude(task="")
            .values("task", "series")
            .annotate(n=Sum("count"))
        )
        return {(r["task"], r["series"]): int(r["n"] or 0) for r in rows}

    recent = counts(60, now - timedelta(seconds=window_s))
    day = counts(3600, now - timedelta(days=1))
    out = {}
    for task in {t for t, _ in recent}:
        failed, completed = recent.get((task, "failed"), 0), recent.get((task, "completed"), 0)
        day_failed = max(0, day.get((task, "failed"), 0) - failed)
        day_completed = max(0, day.get((task, "completed"), 0) - completed)
        out[task] = TaskRates(failed, failed + completed, day_failed, day_failed + day_completed)
    return out


def judge_queue(
    q: QueueMetrics,
    served: bool,
    configured: bool,
    rates: dict[str, TaskRates],
    dlq_before: int,
    th: dict[str, Any],
    recovery: Recovery | None = None,
    muted: MutedDead | None = None,
) -> QueueHealth:
    """Return a queue's verdict from its metrics, whether a worker serves it, its tasks' failure
    rates and its DLQ size at the start of the window (the `muted` dead letters that died within
    it left out of its growth); no live worker within the grace after a Redis outage of
    `recovery` is `recovering`."""
    failing: list[str] = []
    degraded: list[str] = []
    held: list[str] = []
    waiting = q.depth.get("submitted", 0)
    outage = recovery.recovering(q.queue) if recovery is not None and not served else None
    if outage is not None and recovery is not None and (waiting or configured):
        jobs = f" ({waiting} jobs wait)" if waiting else ""
        held.append(f"no live worker serves it yet{jobs}: {recovery.said(outage)}")
    elif not served and waiting:
        failing.append(f"no live worker serves it and {waiting} jobs wait")
    elif not served and configured:
        degraded.append("no live worker serves it")
    if q.oldest_waiting_s > th["OLDEST_WAITING_S"]:
        degraded.append(
            f"its oldest runnable job has waited {q.oldest_waiting_s:.0f} s "
            f"(threshold {th['OLDEST_WAITING_S']:g} s)"
        )
    for task, r in sorted(rates.items()):
        far_above = r.rate >= max(
            r.day_rate * th["FAILURE_RATE_FACTOR"], r.day_rate + th["FAILURE_RATE_MARGIN"]
        )
        if r.ended >= th["FAILURE_MIN_JOBS"] and far_above:
            degraded.append(
                f"task {task} failed {r.rate:.0%} of its last {r.ended} runs, against "
                f"{r.day_rate:.0%} over the day before"
            )
    grew = q.dlq - dlq_before
    muted = muted or MutedDead()
    quiet = min(max(grew, 0), muted.recent)
    if grew - quiet >= th["DLQ_GROWTH"]:
        degraded.append(_dlq_growth(grew - quiet, quiet, q.dlq, muted.total, th["DLQ_WINDOW_S"]))
    if q.mirror_lag_s > th["MIRROR_LAG_S"]:
        degraded.append(
            f"the history mirror is {q.mirror_lag_s:.0f} s behind "
            f"(threshold {th['MIRROR_LAG_S']:g} s)"
        )
    for name, lag in sorted(q.groups.items()):
        if lag.lag_s > th["MIRROR_LAG_S"]:
            degraded.append(
                f"the event stream's consumer group {name!r} is {lag.lag_s:.0f} s and "
                f"{lag.backlog} events behind (threshold {th['MIRROR_LAG_S']:g} s); the stream "
                "is kept until it catches up"
            )
    verdict = "failing" if failing else "degraded" if degraded else "recovering" if held else "ok"
    figures = {
        "waiting": float(waiting),
        "oldest_waiting_s": q.oldest_waiting_s,
        "dlq": float(q.dlq),
        "dlq_growth": float(grew),
        "dlq_muted": float(muted.total),
        "dlq_growth_muted": float(quiet),
        "mirror_lag_s": q.mirror_lag_s,
        "groups_lag_s": max((lag.lag_s for lag in q.groups.values()), default=0.0),
    }
    return QueueHealth(q.queue, verdict, failing + degraded + held, figures)


def _dlq_growth(grew: int, quiet: int, now: int, muted: int, window_s: float) -> str:
    """Say how much a DLQ grew within the window, its muted groups' dead letters left out."""
    if not quiet and not muted:
        return f"its dead-letter queue grew by {grew} within {window_s:g} s (now {now})"
    return (
        f"its dead-letter queue grew by {grew} within {window_s:g} s, not counting {quiet} of "
        f"muted groups (now {now}, {muted} muted)"
    )


def _muted(queue: str, fingerprints: dict[str, Any], window_s: float) -> MutedDead:
    """Count the dead letters of the queue's muted groups: all, and those of the window."""
    since = timezone.now() - timedelta(seconds=window_s)
    return muted_dead(queue, list(fingerprints), since)


def _served(workers: list[dict[str, Any]]) -> set[str]:
    return {q for w in workers for q in str(w.get("queues", "")).split(",") if q}


def queue_health(
    names: list[str], record: bool = False, recovery: Recovery | None = None
) -> list[QueueHealth]:
    """Return the verdict of each queue of `names` (with `record`, the health loop's check: the
    DLQ window moves on, and the queues served are noted for the next outage), excusing what
    the Redis outages of `recovery` (default: those recorded) explain."""
    if recovery is None:
        grace = grace_ms()
        recovery = services.run_engine(lambda c: recent_outages(c, grace))
    snapshot: Metrics = services.metrics_snapshot(names)
    served = _served(services.run_engine(lambda c: c.workers.list()))
    if record:
        _watch().saw(served)
    configured = set(conf.queues())
    held = mutes.muted(names)
    out = []
    for q in snapshot.queues:
        th = settings(q.queue)
        window_s = th["DLQ_WINDOW_S"]
        before = services.run_engine(lambda c: sample_dlq(c, q.queue, q.dlq, window_s, record))  # noqa: B023 (the bridge calls it at once)
        rates = task_rates(q.queue, th["FAILURE_WINDOW_S"])
        muted = _muted(q.queue, held.get(q.queue, {}), window_s)
        out.append(
            judge_queue(
                q, q.queue in served, q.queue in configured, rates, before, th, recovery, muted
            )
        )
    return out


def schedule_health(names: list[str], recovery: Recovery | None = None) -> list[ScheduleHealth]:
    """Return the state of every schedule of `names`, excusing what the Redis outages of
    `recovery` (default: those recorded) explain."""
    if recovery is None:
        grace = grace_ms()
        recovery = services.run_engine(lambda c: recent_outages(c, grace))
    tolerance_s = float(settings()["SCHEDULE_TOLERANCE_S"])
    return services.run_engine(lambda c: engine_schedule_health(c, names, tolerance_s, recovery))


def judged_queues() -> list[str]:
    """Return the queues health looks at: the configured ones and every known one."""
    return sorted({*conf.queues(), *services.known_queues()})


def _changed(previous: str | None, state: str, fine: str) -> bool:
    """Tell whether a recorded state is a change worth a signal (a first `fine` is not)."""
    return previous != state and not (previous is None and state in (fine, "paused"))


def check() -> list[dict[str, Any]]:
    """Judge every queue and schedule, record the states, signal each change; return the alerts
    of the changes (`acheck` hands them to alerts.py). A call that fails tells the watch Redis
    is away: the next check records the outage and holds back what it explains."""
    watch = _watch()
    try:
        return _check(watch)
    except RedisUnavailable:
        watch.failed()
        raise


def _check(watch: OutageWatch) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    grace = grace_ms()
    recovery = services.run_engine(lambda c: watch.look(c, grace))
    names = judged_queues()
    for qh in queue_health(names, record=True, recovery=recovery):
        if qh.verdict == "recovering":  # not recorded: the state before the outage stands
            log.info("queue health recovering queue=%s reasons=%r", qh.queue, qh.reasons)
            continue
        previous = services.run_engine(lambda c: swap_state(c, "queue", qh.queue, qh.verdict))  # noqa: B023 (the bridge calls it at once)
        if _changed(previous, qh.verdict, "ok"):
            log.warning(
                "queue health changed queue=%s verdict=%s previous=%s reasons=%r",
                qh.queue,
                qh.verdict,
                previous,
                qh.reasons,
            )
            queue_health_changed.send_robust(
                QueueHealth, health=qh, previous=previous or "ok", queue=qh.queue
            )
            out.append(
                {"kind": "queue", "previous": previous or "ok", "state": qh.verdict} | qh.as_dict()
            )
    for sh in schedule_health(names, recovery):
        key = f"{sh.queue}/{sh.name}"
        if sh.state == "recovering":
            log.info("schedule health recovering schedule=%s reasons=%r", key, sh.reasons)
            continue
        previous = services.run_engine(lambda c: swap_state(c, "schedule", key, sh.state))  # noqa: B023 (the bridge calls it at once)
        if _changed(previous, sh.state, "ok"):
            log.warning(
                "schedule health changed schedule=%s state=%s previous=%s reasons=%r",
                key,
                sh.state,
                previous,
                sh.reasons,
            )
            schedule_health_changed.send_robust(
                ScheduleHealth, health=sh, previous=previous or "ok", queue=sh.queue
            )
            out.append({"kind": "schedule", "previous": previous or "ok"} | asdict(sh))
    return out


async def acheck() -> float:
    """Run `check` (in Django's thread), deliver its alerts in the background (never waited
    for); return seconds until the next check."""
    for alert in await sync_to_async(check, thread_sensitive=True)():
        alerts.deliver(alert, settings())
    return float(settings()["INTERVAL_S"])
