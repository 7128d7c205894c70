"""Request and response schemas of the JSON API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Field, Schema

JOB_ID = r"^[A-Za-z0-9._:-]{1,128}$"
QUEUE = r"^[A-Za-z0-9._-]{1,100}$"


class JobIn(Schema):
    task: str = Field(..., min_length=1, max_length=255)
    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    queue: str | None = Field(None, pattern=QUEUE)
    priority: int | None = Field(None, ge=-100, le=100)
    delay_s: float | None = Field(None, ge=0, le=366 * 86_400)
    run_at: datetime | None = None
    ttl_s: float | None = Field(None, gt=0, le=366 * 86_400)
    job_id: str | None = Field(None, pattern=JOB_ID)


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


class JobPage(Schema):
    items: list[JobOut]
    next_cursor: str | None


class CancelOut(Schema):
    id: str
    outcome: str


class CountOut(Schema):
    count: int


class ResubmitIn(Schema):
    queue: str = Field("default", pattern=QUEUE)
    ids: list[str] | None = Field(None, max_length=10_000)
    task: str | None = None


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
    """Act on ids, or on every job of the history matching a filter; dry_run only counts."""

    ids: list[str] | None = Field(None, max_length=10_000)
    state: str | None = None
    queue: str | None = None
    task: str | None = None
    q: str | None = None
    dry_run: bool = False


class BulkOut(Schema):
    matched: int
    changed: int
