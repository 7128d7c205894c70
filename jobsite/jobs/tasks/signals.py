"""Django signals for every job a worker runs, engine tasks and django.tasks alike.

Connect receivers as with any Django signal; each gets `sender=Worker` (the engine's class) and
the keyword arguments `job` (an engine.Job), `worker_id`, and where they apply `outcome`
("completed", "failed", "retry", "cancelled"...), `error` (the attempt's error record: type,
message, exception, traceback) and `delay_s` (until the retry). A receiver that raises is
logged and never fails the job.

- `job_started`: an attempt is about to run.
- `job_finished`: an attempt ended, with its outcome.
- `job_retrying`: it will run again in `delay_s` seconds.
- `job_dead_lettered`: it failed for good and went to the dead-letter queue.

    @receiver(job_dead_lettered)
    def report(sender, job, error, **kwargs):
        sentry_sdk.capture_message(f"{job.task} failed: {error['message']}")
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

_BY_KIND = {
    "before_run": job_started,
    "after_run": job_finished,
    "retry": job_retrying,
    "dead_letter": job_dead_lettered,
}


async def send_signals(event: HookEvent) -> None:
    """The engine hook that turns each HookEvent into its Django signal."""
    more: dict[str, Any] = {}
    if event.kind != "before_run":
        more = {"outcome": event.outcome, "error": event.error}
    if event.kind == "retry":
        more["delay_s"] = event.delay_s
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
