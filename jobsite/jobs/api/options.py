"""Every per-call task option of the engine, as the API takes it, and its mapping onto
`Task.using(...)` (the same options a Python caller passes there).

A field left out (or null) keeps the task's own setting. The engine checks each value once
more (ConfigError, answered as 422 with its message), so the rules live in one place.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from ninja import Field, Schema
from pydantic import ConfigDict

from engine import CHOSEN_JOB_ID_PATTERN, Task

YEAR_S = 366 * 86_400
# A local name of a job inside one flow (what depends_on points at), or a job id.
REF_PATTERN = r"^[A-Za-z0-9_:@-][A-Za-z0-9._:@-]{0,127}$"
QUEUE = r"^[A-Za-z0-9._-]{1,100}$"


class DeduplicationIn(Schema):
    """One job per `id` at a time: simple (until it ends), throttle (for ttl_s), debounce."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., min_length=1, max_length=200)
    mode: Literal["simple", "throttle", "debounce"] = "simple"
    ttl_s: float | None = Field(None, gt=0, le=YEAR_S)


class CallbackIn(Schema):
    """A job submitted with this one as its child, in its queue: `task` called with `kwargs`
    and `parent_id` (the job's id)."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(..., min_length=1, max_length=255)
    kwargs: dict[str, Any] = Field(default_factory=dict)


class TaskOptionsIn(Schema):
    """The options of one call; see docs/api.md for each."""

    model_config = ConfigDict(extra="forbid")

    queue: str | None = Field(None, pattern=QUEUE)
    priority: int | None = Field(None, ge=-100, le=100)
    delay_s: float | None = Field(None, ge=0, le=YEAR_S)
    run_at: datetime | None = None
    # Unique across every queue; no '@' (kept for the ids of schedule ticks).
    job_id: str | None = Field(None, pattern=CHOSEN_JOB_ID_PATTERN)
    version: int | None = Field(None, ge=1, le=1_000_000)
    # Retries and time limits.
    max_retries: int | None = Field(None, ge=0, le=1000)
    retry_delay_s: float | None = Field(None, ge=0, le=YEAR_S)
    # "none": each retry re-queued at once (the engine's backoff=None; JSON null means unset).
    backoff: (
        Literal[
            "constant", "linear", "exponential", "exponential_jitter", "exponential_spread", "none"
        ]
        | float
        | Annotated[list[Annotated[float, Field(ge=0, le=YEAR_S)]], Field(min_length=1)]
        | None
    ) = None
    max_retry_delay_s: float | None = Field(None, ge=0, le=YEAR_S)
    timeout_s: float | None = Field(None, gt=0, le=YEAR_S)
    max_heartbeat_interval_s: float | None = Field(None, gt=0, le=YEAR_S)
    max_stalls: int | None = Field(None, ge=0, le=100)
    on_shutdown: Literal["stop", "resubmit", "continue"] | None = None
    # Staleness: from creation, an absolute deadline, most time waiting in a queue.
    ttl_s: float | None = Field(None, gt=0, le=YEAR_S)
    good_until: datetime | None = None
    queue_timeout_s: float | None = Field(None, gt=0, le=YEAR_S)
    # What happens to the job at its end.
    dead_letter_policy: Literal["save", "none"] | None = None
    result_ttl_s: int | None = Field(None, gt=0, le=YEAR_S)
    # Retention by final state: state -> seconds its job is kept (0: dropped at once).
    cleanup_on: (
        dict[
            Literal["completed", "failed", "cancelled", "stalled", "dropped", "expired"],
            Annotated[float, Field(ge=0, le=YEAR_S)],
        ]
        | None
    ) = None
    # A repeating job: a schedule named by the job id, a run every repeat_every_s seconds (the
    # first at once, or after delay_s / at run_at), repeat_limit runs in all.
    repeat_every_s: float | None = Field(None, gt=0, le=YEAR_S, allow_inf_nan=False)
    repeat_limit: int | None = Field(None, ge=1, le=1_000_000_000)
    # Limits.
    deduplication: DeduplicationIn | None = None
    concurrency_key: str | None = Field(None, min_length=1, max_length=200)
    concurrency_limit: int | None = Field(None, ge=1, le=100_000)
    # At most this many jobs of the task run at once across every worker (its own key).
    max_running: int | None = Field(None, ge=1, le=100_000)
    rate_limit: str | None = Field(None, min_length=3, max_length=32)
    # Each value of the key gets its own rate_limit budget (the call's or the task's).
    rate_key: str | None = Field(None, min_length=1, max_length=200)
    # At the limit: wait for the slot, drop the job (it ends cancelled, "rate limited"), or
    # reschedule it to its next free slot; the answer's rate_limited_until says when that is.
    on_rate_limit: Literal["wait", "drop", "reschedule"] | None = None
    # Parents: ids of jobs (in the same queue) that must complete first, and what their failure
    # does to this one.
    depends_on: list[Annotated[str, Field(pattern=REF_PATTERN)]] | None = Field(
        None, max_length=1000
    )
    on_parent_failure: Literal["wait", "fail", "cancel"] | None = None
    # Which end of the parents releases the job: all completed (success), one failed (failure:
    # a parent that completes or is cancelled cancels it), or any end.
    runs_on: Literal["success", "failure", "end"] | None = None
    # Callbacks: jobs submitted with this one as its children, run after it completes (else
    # cancelled) or after it fails for good (else cancelled); each checked as an enqueue of
    # its task in this job's queue, where it runs.
    on_success: CallbackIn | None = None
    on_failure: CallbackIn | None = None


# The fields `Task.using` takes as options (the rest are its own parameters or handled here).
_USING = (
    "queue",
    "priority",
    "max_retries",
    "retry_delay_s",
    "backoff",
    "max_retry_delay_s",
    "timeout_s",
    "max_heartbeat_interval_s",
    "max_stalls",
    "on_shutdown",
    "ttl_s",
    "good_until",
    "queue_timeout_s",
    "dead_letter_policy",
    "result_ttl_s",
    "cleanup_on",
    "repeat_every_s",
    "repeat_limit",
    "concurrency_key",
    "concurrency_limit",
    "max_running",
    "rate_limit",
    "rate_key",
    "on_rate_limit",
    "on_parent_failure",
    "runs_on",
)
OPTION_NAMES = frozenset(TaskOptionsIn.model_fields)


def _beyond_horizon(at: datetime) -> bool:
    """Tell whether `at` lies further ahead than delay_s may (naive times are UTC)."""
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return (aware - datetime.now(UTC)).total_seconds() > YEAR_S


class BadOptions(ValueError):
    """Options that cannot go together (the message says why)."""


def apply(task: Task, body: TaskOptionsIn, depends_on: list[str] | None = None) -> Task:
    """Return `task` with the body's options, as `task.using(...)` (ConfigError if refused);
    its callbacks are set on `task` before, once checked (jobout.submittable).

    `depends_on` replaces the body's own (a flow maps its refs to job ids first).
    """
    options: dict[str, Any] = {
        name: getattr(body, name) for name in _USING if getattr(body, name) is not None
    }
    if body.backoff == "none":
        options["backoff"] = None
    if body.deduplication is not None:
        options["deduplication"] = body.deduplication.model_dump()
    if (
        body.concurrency_limit is not None
        and body.concurrency_key is None
        and task.options.concurrency_key is None
    ):
        raise BadOptions("concurrency_limit needs a concurrency_key (the task has none)")
    if body.version is not None:
        task = dataclasses.replace(task, version=body.version)
    if body.run_at is not None and _beyond_horizon(body.run_at):
        raise BadOptions(f"run_at must be within {YEAR_S // 86_400} days from now, as delay_s")
    parents = depends_on if depends_on is not None else body.depends_on
    if body.runs_on not in (None, "success") and not parents:
        raise BadOptions("runs_on needs depends_on: it says which end of the parents runs the job")
    return task.using(
        delay_s=body.delay_s,
        run_at=body.run_at,
        job_id=body.job_id,
        depends_on=parents,
        **options,
    )
