"""Request and response schemas of the JSON API."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from ninja import Field, Schema
from pydantic import ConfigDict, model_validator

from engine import JOB_ID_PATTERN

QUEUE = r"^[A-Za-z0-9._-]{1,100}$"
QUEUE_NAME = re.compile(QUEUE)


class JobIn(Schema):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(..., min_length=1, max_length=255)
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    queue: str | None = Field(None, pattern=QUEUE)
    priority: int | None = Field(None, ge=-100, le=100)
    delay_s: float | None = Field(None, ge=0, le=366 * 86_400)
    run_at: datetime | None = None
    ttl_s: float | None = Field(None, gt=0, le=366 * 86_400)
    job_id: str | None = Field(None, pattern=JOB_ID_PATTERN)


class EventOut(Schema):
    at: datetime
    from_state: str
    to_state: str
    attempt: int
    worker: str
    error: str


class JobOut(Schema):
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
    started_at: datetime | None = None
    completed_at: datetime | None = None
    run_at: datetime | None = None
    history: list[EventOut] = []


class LogLineOut(Schema):
    at_ms: int
    attempt: int
    message: str


class JobDetailOut(JobOut):
    """One job with its newest log lines and how many older ones were dropped."""

    logs: list[LogLineOut] = []
    logs_dropped: int = 0


class JobPage(Schema):
    items: list[JobOut]
    next_cursor: str | None


class CancelOut(Schema):
    id: str
    outcome: str


class CountOut(Schema):
    count: int


class ResubmitIn(Schema):
    model_config = ConfigDict(extra="forbid")

    queue: str = Field("default", pattern=QUEUE)
    ids: list[Annotated[str, Field(pattern=JOB_ID_PATTERN)]] | None = Field(
        None, min_length=1, max_length=10_000
    )
    task: str | None = Field(None, min_length=1, max_length=255)


class QueueOut(Schema):
    name: str
    paused: bool
    counts: dict[str, int]
    oldest_waiting_s: float | None


class WorkerOut(Schema):
    id: str
    host: str
    pid: int
    queues: str
    concurrency: int
    current_jobs: list[dict[str, Any]]
    started_at_ms: int
    heartbeat_at_ms: int


class StatsPoint(Schema):
    minute: datetime
    completed: int
    failed: int


class TaskOut(Schema):
    name: str
    version: int
    queue: str
    priority: int
    max_retries: int
    timeout_s: float | None
    arguments: dict[str, Any]


class ErrorOut(Schema):
    detail: Any


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
    q: str | None = Field(None, min_length=1, max_length=200)
    since: datetime | None = None
    dry_run: bool = False

    @model_validator(mode="after")
    def _chosen(self) -> BulkIn:
        if self.ids is None and not self.all and not self.selector():
            raise ValueError(
                'choose the jobs: "ids", at least one of "state", "queue", "task", "q", '
                '"since", or "all": true'
            )
        return self

    def selector(self) -> dict[str, Any]:
        """Return the filter this body chose, as JSON (empty for ids or "all")."""
        return self.model_dump(
            mode="json", exclude_none=True, include={"state", "queue", "task", "q", "since"}
        )


class BulkOut(Schema):
    matched: int
    changed: int
