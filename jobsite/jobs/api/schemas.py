"""Request and response schemas of the JSON API."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Field, Schema
from pydantic import BaseModel, ConfigDict, model_validator

from engine import JOB_ID_PATTERN
from jobsite.jobs.api.options import TaskOptionsIn
from jobsite.jobs.search import SearchText

QUEUE = r"^[A-Za-z0-9._-]{1,100}$"
QUEUE_NAME = re.compile(QUEUE)


class Out(BaseModel):
    """A response schema: validated by pydantic-core alone, from dicts or attributes.

    ninja's Schema routes every attribute of every object through a Python getter (about a
    third of a 50-row list's time); what the API returns needs none of its resolvers.
    """

    model_config = ConfigDict(from_attributes=True)


class JobIn(TaskOptionsIn):
    """A call of a task with any of its per-call options (taskoptions.TaskOptionsIn)."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(..., min_length=1, max_length=255)
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)


class EventOut(Out):
    at: datetime
    from_state: str
    to_state: str
    attempt: int
    worker: str
    error: str


class JobOut(Out):
    id: str
    task: str
    queue: str
    state: str
    priority: int
    attempt: int
    args: Any
    kwargs: Any
    result: Any = None
    errors: list[Any] = []
    progress: float | None = None
    progress_message: str = ""
    worker: str = ""
    submitted_at: datetime | None = None
    # Claimed by a worker (it may wait for a free slot before it starts).
    claimed_at: datetime | None = None
    # A started job's phase: "claimed" until the worker begins its attempt, then "running";
    # None in any other state, or from the history.
    phase: Literal["claimed", "running"] | None = None
    started_at: datetime | None = None
    # Start of the latest attempt when it was not the first (retries, manual retries).
    retried_at: datetime | None = None
    completed_at: datetime | None = None
    # completed_at under the name of how it ended: failed_at for the dead states (failed,
    # stalled, expired, dropped), cancelled_at for cancelled, so a client reads how it ended.
    failed_at: datetime | None = None
    cancelled_at: datetime | None = None
    # The latest attempt's run time: its start to the end (None until it ended).
    duration_seconds: float | None = None
    run_at: datetime | None = None
    # The retries the task allows, and the newest error's message alone.
    max_retries: int | None = None
    error: str | None = None
    # Why a retry (or replay) would not run it ("": it would): dropped as an unknown task
    # that no worker has registered yet (POST /jobs/{id}/retry answers 409 then).
    cannot_run: str = ""
    history: list[EventOut] = []


class LogLineOut(Out):
    at_ms: int
    attempt: int
    message: str


class RelatedOut(Out):
    """A job of the same flow: its id, task and state, and the ids of its parents."""

    id: str
    task: str
    state: str
    parents: list[str] = []
    # Which end of its parents runs it, while Redis holds it: "failure" (an error callback) or
    # "end"; None for their success (and once Redis forgot the job).
    runs_on: str | None = None


class WaitingOut(Out):
    """Why a job has not started (engine.resources.explain): a code, a sentence, when it ends
    (where it is known), the jobs it names, where to change it (`link`) and each job's page
    (`links`)."""

    code: str
    message: str
    target: str
    until_ms: int | None = None
    jobs: list[str] = []
    link: str = ""
    links: list[str] = []


class JobDetailOut(JobOut):
    """One job with its newest log lines (and how many older ones were dropped), its replay
    links, and its graph: parents and children with their states, and every job of its flow
    (`flow`, capped)."""

    logs: list[LogLineOut] = []
    logs_dropped: int = 0
    # The state its task last saved with `checkpoint()` (JSON), which its next attempt resumes
    # from; None when none was saved, once it completed, and once Redis forgot the job.
    checkpoint: Any = None
    # The newest error's fingerprint (dead-letter group), the job this one replays, and the
    # jobs that replay this one (POST /jobs/{id}/replay).
    fingerprint: str = ""
    replay_of: str = ""
    replays: list[str] = []
    flow_id: str | None = None
    parents: list[RelatedOut] = []
    children: list[RelatedOut] = []
    flow: list[RelatedOut] = []
    # Set while the job waits for a worker with its task version (a rolling deploy): its
    # task@version, and since when no claiming worker had it (claim-12.lua).
    waiting_for_version: str = ""
    waiting_for_version_since: datetime | None = None
    # Why it has not started, in order ([] once it started or ended).
    waiting: list[WaitingOut] = []


class JobPage(Out):
    """A page of the history; pass next_cursor as `cursor` for the page after, prev_cursor as
    `before` for the page before (None: no job lies that way)."""

    items: list[JobOut]
    next_cursor: str | None
    prev_cursor: str | None = None


class JobCountsOut(Out):
    """How many jobs of the history match, in all and per state."""

    total: int
    states: dict[str, int]


class CancelOut(JobOut):
    """The job as the cancel left it; `outcome`: cancelled, or cancelling while it stops."""

    outcome: str


class CountOut(Out):
    count: int


class ResubmitIn(Schema):
    model_config = ConfigDict(extra="forbid")

    queue: str = Field("default", pattern=QUEUE)
    ids: list[Annotated[str, Field(pattern=JOB_ID_PATTERN)]] | None = Field(
        None, min_length=1, max_length=10_000
    )
    task: str | None = Field(None, min_length=1, max_length=255)


class PurgeIn(Schema):
    """Dead-letter jobs of one queue to delete, by id."""

    model_config = ConfigDict(extra="forbid")

    queue: str = Field("default", pattern=QUEUE)
    ids: list[Annotated[str, Field(pattern=JOB_ID_PATTERN)]] = Field(
        ..., min_length=1, max_length=10_000
    )


class QueueOut(Out):
    name: str
    paused: bool
    counts: dict[str, int]
    oldest_waiting_s: float | None


class WorkerOut(Out):
    id: str
    host: str
    pid: int
    queues: str
    concurrency: int
    current_jobs: list[dict[str, Any]]
    started_at_ms: int
    heartbeat_at_ms: int
    # claiming, quiet (told to stop claiming), stopping or retiring (recycling)
    state: str = "claiming"
    # The role whose queues it follows ("": its queues were given at start).
    role: str = ""
    # Resident memory at its last renewal, MiB (0: a worker that does not say).
    rss_mib: float = 0.0
    # Jobs it completed, and attempts of it that ended in an error (retried or not), since it
    # started, in the queues the request may view.
    completed: int = 0
    failed: int = 0
    # The task@versions it runs.
    versions: list[str] = []


class StatsPoint(Out):
    minute: datetime
    completed: int
    failed: int


class TaskOut(Out):
    name: str
    version: int
    queue: str
    priority: int
    max_retries: int
    timeout_s: float | None
    arguments: dict[str, Any]


class ErrorOut(Out):
    detail: Any


class RedisStateOut(Out):
    """Whether the engine's Redis answers, as the server last saw it, and since when (ms since
    the epoch, the server's clock; 0: up since before the server's first call)."""

    up: bool
    since_ms: int


class UnavailableOut(ErrorOut):
    """503: Redis does not answer (or refuses for now)."""

    redis: RedisStateOut


# The error answers an operation may give, for its `response` in the schema.
ERRORS: dict[int, Any] = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
    503: UnavailableOut,
}


class BulkIn(Schema):
    """Act on ids, or on every job of the history matching a filter; dry_run only counts.

    Something must be chosen: ids, at least one filter, or `"all": true` for every job.
    """

    model_config = ConfigDict(extra="forbid")

    ids: list[Annotated[str, Field(pattern=JOB_ID_PATTERN)]] | None = Field(
        None, min_length=1, max_length=10_000
    )
    all: bool = False
    state: str | None = Field(None, min_length=1, max_length=16)
    queue: str | None = Field(None, pattern=QUEUE)
    task: str | None = Field(None, min_length=1, max_length=255)
    # Part of the task name, any case (the job list's task search).
    task_like: str | None = Field(None, min_length=1, max_length=255)
    q: SearchText | None = Field(None, min_length=1)
    since: datetime | None = None
    dry_run: bool = False

    @model_validator(mode="after")
    def _chosen(self) -> BulkIn:
        if self.ids is None and not self.all and not self.selector():
            raise ValueError(
                'choose the jobs: "ids", at least one of "state", "queue", "task", "task_like", '
                '"q", "since", or "all": true'
            )
        return self

    def selector(self) -> dict[str, Any]:
        """Return the filter this body chose, as JSON (empty for ids or "all")."""
        return self.model_dump(
            mode="json",
            exclude_none=True,
            include={"state", "queue", "task", "task_like", "q", "since"},
        )


class BulkOut(Out):
    matched: int
    changed: int
    # Why the jobs not changed were skipped: reason -> how many (empty when none was).
    skipped: dict[str, int] = {}


class BulkRunOut(Out):
    """A bulk change past JOBSITE["BULK_MAX"], running in the background (202), and later."""

    id: int
    action: str
    # running, done, failed, or interrupted: its process stopped (a deploy) before the end; a
    # new request with the same filter goes on with the jobs still matching.
    state: str
    selector: dict[str, Any]
    matched: int
    looked_at: int
    changed: int
    skipped: dict[str, int]
    by: str
    started_at: datetime
    finished_at: datetime | None
    error: str


# Why a job asked for was not run now, in words (engine client.jobs.run_now's outcomes).
RUN_NOW_SKIPPED = {
    "not_found": "no longer in Redis",
    "not_scheduled": "not scheduled any more (already submitted, running or finished)",
}


class RunNowIn(Schema):
    """Scheduled jobs of one queue to run now, by id."""

    model_config = ConfigDict(extra="forbid")

    queue: str = Field("default", pattern=QUEUE)
    ids: list[Annotated[str, Field(pattern=JOB_ID_PATTERN)]] = Field(
        ..., min_length=1, max_length=10_000
    )
