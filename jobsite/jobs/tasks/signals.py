"""Django signals for every job a worker runs and every transition wherever it happened.

Connect receivers as with any Django signal; each gets `sender=Worker` (the engine's class) and
the keyword arguments `job` (an engine.Job), `worker_id`, and where they apply `outcome`
("completed", "failed", "retry", "cancelled"...), `error` (the newest error record: type,
message, exception, traceback) and `delay_s` (until the retry). A receiver that raises is
logged and never fails the job.

Around an attempt, in the worker that runs it:
- `job_started`: an attempt is about to run.
- `job_finished`: an attempt ended, with its outcome.

From the queue's event stream (engine/periodic/transitions.py), once per transition across all
workers, wherever it happened (a worker, the cleaner, a client, the API); these also get
`from_state`, `reason` (the event's words: "deadline passed", "cancelled by user", "parent p1 ended
failed"...) and `at_ms`; `worker_id` is the worker that made it ("" for a client or the cleaner
of no worker):
- `job_retrying`: it will run again in `delay_s` seconds (a failed attempt, a recovered stall).
- `job_failed`, `job_cancelled`, `job_expired`, `job_stalled`, `job_dropped`: it ended so
  (a child a parent's failure ended: `job_failed` or `job_cancelled` from "blocked").
- `job_dead_lettered`: it failed, stalled, expired or was dropped, into the dead-letter queue.
- `job_deduplicated`: a submit was ignored for this job (its deduplication id); `job_debounced`:
  a newer submit replaced it (after its `job_cancelled`); both get `other_job`, that job's id.

    @receiver(job_dead_lettered)
    def report(sender, job, error, reason, **kwargs):
        why = error["message"] if error else reason
        sentry_sdk.capture_message(f"{job.task} ended {job.state}: {why}")
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

from engine import HookEvent, Worker

log = logging.getLogger("jobsite.signals")

job_started = Signal()
job_finished = Signal()
job_retrying = Signal()
job_dead_lettered = Signal()
job_failed = Signal()
job_cancelled = Signal()
job_expired = Signal()
job_stalled = Signal()
job_dropped = Signal()
job_deduplicated = Signal()
job_debounced = Signal()
# Health (jobsite/jobs/history/health.py), once per change of state across all processes:
# `health` (a QueueHealth: verdict, reasons; or an engine ScheduleHealth: state, reasons),
# `previous` (the state before) and `queue`.
queue_health_changed = Signal()
schedule_health_changed = Signal()

_BY_KIND = {
    "before_run": job_started,
    "after_run": job_finished,
    "retry": job_retrying,
    "dead_letter": job_dead_lettered,
    "failed": job_failed,
    "cancelled": job_cancelled,
    "expired": job_expired,
    "stalled": job_stalled,
    "dropped": job_dropped,
    "deduplicated": job_deduplicated,
    "debounced": job_debounced,
}
# The kinds that come from the event stream, not from around an attempt.
_STREAM_KINDS = frozenset(_BY_KIND) - {"before_run", "after_run"}


async def send_signals(event: HookEvent) -> None:
    """The engine hook that turns each HookEvent into its Django signal."""
    more: dict[str, Any] = {}
    if event.kind != "before_run":
        more = {"outcome": event.outcome, "error": event.error}
    if event.kind == "retry":
        more["delay_s"] = event.delay_s
    if event.kind in _STREAM_KINDS:
        more |= {"from_state": event.from_state, "reason": event.reason, "at_ms": event.at_ms}
    if event.kind in ("deduplicated", "debounced"):
        more["other_job"] = event.other_job
    responses = await _BY_KIND[event.kind].asend_robust(
        Worker, job=event.job, worker_id=event.worker_id, **more
    )
    for receiver, response in responses:
        if isinstance(response, Exception):
            log.error(
                "job signal receiver failed event=%s receiver=%r job=%s error=%r",
                event.kind,
                receiver,
                event.job.id,
                response,
            )


# What a Django-side worker runs its jobs with (runworker, jobsite.testing.run_jobs).
WORKER_HOOKS = [send_signals]
