"""The durable, queryable history of jobs, mirrored from the engine's event streams."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from engine import state_vocabulary

# Every list derives from the engine's one vocabulary (admin, API and dashboard alike).
VOCABULARY = state_vocabulary()
LOST = "lost"  # the history's own state: reconciliation found no trace of a live job in Redis
TERMINAL = VOCABULARY["terminal"]
CANCELLABLE = VOCABULARY["cancellable"]
RETRYABLE = VOCABULARY["retryable"]
# Ended without success: what "recent failures" lists (and its partial index covers).
DEAD = VOCABULARY["dead"]
# The word an operator reads for a state where it differs from the engine's: the dashboard,
# the admin (the field's choices) and the docs' glossary say it; the API keeps the engine's.
STATE_LABELS = {"submitted": "waiting", "started": "running"}
STATE_CHOICES = [(s, STATE_LABELS.get(s, s)) for s in VOCABULARY["states"]]


class JobRecord(models.Model):
    """One engine job as of the last event applied; state only ever comes from events."""

    id = models.CharField(primary_key=True, max_length=128)
    queue = models.CharField(max_length=100)
    task = models.CharField(max_length=255)
    version = models.IntegerField(default=1)
    state = models.CharField(max_length=16, choices=STATE_CHOICES)
    priority = models.IntegerField(default=0)
    attempt = models.IntegerField(default=0)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    result = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    progress = models.FloatField(null=True, blank=True)
    progress_message = models.CharField(max_length=500, blank=True, default="")
    # The job's newest log lines, {"at_ms", "attempt", "message"} (engine: job.log), and how
    # many older ones the engine dropped to stay within its caps. Database defaults keep raw
    # inserts that predate them (bench/) working; not editable: rows change only by events.
    logs = models.JSONField(default=list, db_default=[], blank=True, editable=False)
    logs_dropped = models.IntegerField(default=0, db_default=0, editable=False)
    worker = models.CharField(max_length=200, blank=True, default="")
    # The fingerprint of the newest error (engine.ops.fingerprint): dead letters are grouped by it.
    fingerprint = models.CharField(
        max_length=32, blank=True, default="", db_default="", editable=False
    )
    # The job this one replays with edited arguments (POST /jobs/{id}/replay); its replays are
    # the rows whose replay_of is its id.
    replay_of = models.CharField(
        max_length=128, blank=True, default="", db_default="", editable=False
    )
    # Jobs that had to complete before this one (depends_on), and the flow it was submitted in:
    # a whole graph is one query on the partial index below (most jobs have no flow).
    parents = models.JSONField(default=list, db_default=[], blank=True, editable=False)
    flow_id = models.CharField(max_length=128, null=True, blank=True, editable=False)
    sent_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True, db_index=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    retried_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    run_at = models.DateTimeField(null=True, blank=True)
    # Stream id ("ms-seq", zero-padded so it sorts as text) of the last event applied.
    last_event_id = models.CharField(max_length=40, default="")
    updated_at = models.DateTimeField(auto_now=True)
    # Every state change in order, as {"id", "from", "to", "at_ms", "attempt", "worker", "error"}
    # (see history.transition): kept in the row, so a job costs one row write per batch.
    transitions = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name = "job"
        ordering = ["-submitted_at"]
        permissions = [
            ("cancel_job", "Can cancel jobs"),
            ("retry_job", "Can retry jobs and resubmit them from the DLQ"),
            ("purge_job", "Can purge finished jobs"),
        ]
        # Few indexes on purpose: every batch rewrites its jobs' rows. Each list filter
        # (queue, task, state) has one (filter, submitted_at) index that gives its newest jobs
        # in order, on PostgreSQL and SQLite alike; (state, submitted_at) also gives
        # retention's oldest; the partial index holds only the few dead rows, newest first.
        indexes = [
            models.Index(fields=["queue", "submitted_at"], name="jobsite_job_queue_submitted"),
            models.Index(fields=["task", "submitted_at"], name="jobsite_job_task_submitted"),
            models.Index(fields=["state", "submitted_at"], name="jobsite_job_state_submitted"),
            models.Index(
                fields=["-completed_at"],
                condition=models.Q(state__in=DEAD),
                name="jobsite_job_dead",
            ),
            # Partial: only dead rows are grouped, only replays have a link (most rows are neither).
            models.Index(
                fields=["fingerprint", "-completed_at"],
                condition=models.Q(state__in=DEAD),
                name="jobsite_job_fingerprint",
            ),
            models.Index(
                fields=["replay_of"],
                condition=~models.Q(replay_of=""),
                name="jobsite_job_replay_of",
            ),
            models.Index(
                fields=["flow_id"],
                condition=models.Q(flow_id__isnull=False),
                name="jobsite_job_flow",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task} {self.id} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        """Tell whether the job reached a terminal state."""
        return self.state in TERMINAL

    def timeline(self) -> list[dict[str, Any]]:
        """Return the transitions, oldest first, each with `at` as an aware datetime."""
        return [
            {**t, "at": datetime.fromtimestamp(int(t.get("at_ms", 0)) / 1000, tz=UTC)}
            for t in self.transitions or []
            if isinstance(t, dict)
        ]


class JobSearch(models.Model):
    """The text search finds a job by: task, arguments and error messages, lower-cased.

    A table of its own, written when the text changes (a job's first sight and its failures),
    not on every state change; a trigram index serves it on PostgreSQL (migration 0003).
    """

    job_id = models.CharField(primary_key=True, max_length=128)
    text = models.TextField()

    class Meta:
        verbose_name = "search text"

    def __str__(self) -> str:
        return self.job_id


class RollupCount(models.Model):
    """One number of the charts' rollup, for a time slot of `span_s` seconds from `start`.

    `series` is a state entered (count of jobs), `retried` (attempts that ended and went
    again), or `wait` / `run` (a duration histogram: `bucket` is its log-scale bucket, see
    rollup.bucket_of; 0 for counts). The mirror adds the events it inserts (never a replayed
    one) to every span at once (rollup.SPANS_S), so a range query reads one row per point
    whatever the throughput; retention prunes each span on its own horizon.
    """

    span_s = models.IntegerField()
    start = models.DateTimeField()
    queue = models.CharField(max_length=100)
    task = models.CharField(max_length=255)
    series = models.CharField(max_length=16)
    bucket = models.SmallIntegerField(default=0)
    count = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "rollup count"
        # A chart or the stats read one slice (span, queue, task: the totals, a queue's task,
        # ...) over a time range.
        indexes = [
            models.Index(fields=["span_s", "queue", "task", "start"], name="jobsite_rollup_slice")
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["span_s", "start", "queue", "task", "series", "bucket"],
                name="unique_rollup_count",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M} +{self.span_s}s {self.queue} {self.task} {self.series}"


class QueueDepth(models.Model):
    """A queue's live depth sampled once a minute: waiting, scheduled and running jobs."""

    minute = models.DateTimeField()
    queue = models.CharField(max_length=100)
    waiting = models.IntegerField(default=0)
    scheduled = models.IntegerField(default=0)
    running = models.IntegerField(default=0)

    class Meta:
        verbose_name = "queue depth sample"
        constraints = [
            models.UniqueConstraint(fields=["minute", "queue"], name="unique_queue_depth"),
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.queue}"


class Schedule(models.Model):
    """The admin's entry for schedules (repeatables), which live in Redis: no table behind it.

    The admin's schedule pages (admin_schedules.py) read and change them through the engine;
    the queues' change permission (`change_queuerecord`) covers them, so this model has none
    of its own.
    """

    name = models.CharField(primary_key=True, max_length=113)
    queue = models.CharField(max_length=100)

    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = "schedule"

    def __str__(self) -> str:
        return f"{self.queue}/{self.name}"


class WorkerRecord(models.Model):
    """A worker as last seen in the engine's registry."""

    id = models.CharField(primary_key=True, max_length=200)
    host = models.CharField(max_length=200)
    pid = models.IntegerField()
    queues = models.CharField(max_length=500)
    # The worker role whose queues it follows ("": queues given at start).
    role = models.CharField(max_length=100, blank=True, default="")
    concurrency = models.IntegerField()
    current_jobs = models.JSONField(default=list)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()

    class Meta:
        verbose_name = "worker"

    def __str__(self) -> str:
        return self.id


class OutboxEntry(models.Model):
    """A job enqueued inside a transaction; pushed to Redis after commit (or by the relay)."""

    job_id = models.CharField(max_length=128, unique=True)
    queue = models.CharField(max_length=100)
    job = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    pushed_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        verbose_name = "outbox entry"
        verbose_name_plural = "outbox entries"

    def __str__(self) -> str:
        return f"outbox {self.job_id}"


class FlowName(models.Model):
    """The name a flow was given when it was submitted (a flow is known by its jobs' flow_id)."""

    flow_id = models.CharField(primary_key=True, max_length=128)
    name = models.CharField(max_length=200, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "flow name"

    def __str__(self) -> str:
        return f"{self.name} ({self.flow_id})"


class BulkRun(models.Model):
    """A bulk change of more jobs than one request changes, run in the background: what it
    selects and how far it got (GET /bulk/runs/{id})."""

    action = models.CharField(max_length=16)  # cancel | retry | resubmit | purge
    # The filter, as the request gave it (BulkIn.selector; a dead-letter group's fingerprint,
    # queue and task); {} for every job.
    selector = models.JSONField(default=dict, blank=True)
    # The queues the request's token was narrowed to; null: every queue.
    queues = models.JSONField(null=True, blank=True)
    by = models.CharField(max_length=150)
    via = models.CharField(max_length=200)
    # The jobs matching when it began; those submitted later are left alone.
    matched = models.IntegerField(default=0)
    looked_at = models.IntegerField(default=0)
    changed = models.IntegerField(default=0)
    skipped = models.JSONField(default=dict, blank=True)  # reason -> how many
    # The walk's position: the last job id looked at (rows are walked in id order).
    last_id = models.CharField(max_length=128, blank=True, default="")
    state = models.CharField(max_length=16, default="running")  # running | done | failed
    error = models.TextField(blank=True, default="")
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "bulk run"

    def __str__(self) -> str:
        return f"{self.action} {self.matched} jobs ({self.state})"


class QueueRecord(models.Model):
    """A queue as last seen in Redis: paused or not, and its live counts."""

    name = models.CharField(primary_key=True, max_length=100)
    paused = models.BooleanField(default=False)
    submitted = models.IntegerField(default=0)
    scheduled = models.IntegerField(default=0)
    started = models.IntegerField(default=0)
    dlq = models.IntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "queue"

    def __str__(self) -> str:
        return self.name


class ApiToken(models.Model):
    """A bearer token for the JSON API; only its SHA-256 is stored.

    It acts as its user, never beyond: `permissions` (codenames) and `queues`, when not empty,
    narrow what it may do; past `expires_at` it is refused.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="api_tokens",
        editable=False,
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=8, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    permissions = models.JSONField(default=list, blank=True)
    queues = models.JSONField(default=list, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"


class DeadLetterMute(models.Model):
    """A dead-letter group (error fingerprint) muted in one queue: its dead letters are still
    recorded and counted, but raise no alert until `until` (null: until unmuted).

    Changed only through services/mutes.py, which checks the permission and audits; the
    dead-letter actions' permission (`retry_job`) covers it, so it has none of its own.
    """

    queue = models.CharField(max_length=100)
    fingerprint = models.CharField(max_length=32)
    # When the mute ends by itself; null: it lasts until someone unmutes the group.
    until = models.DateTimeField(null=True, blank=True)
    muted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    muted_at = models.DateTimeField()
    reason = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        default_permissions = ()
        verbose_name = "muted dead-letter group"
        constraints = [
            models.UniqueConstraint(fields=["queue", "fingerprint"], name="unique_mute_of_group"),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.fingerprint}"

    def active(self, now: datetime) -> bool:
        """Tell whether the mute still holds at `now`."""
        return self.until is None or self.until > now


# The dead rows' condition in literal SQL, as the partial indexes state it: SQLite uses a
# partial index only for a query that repeats its condition, constants included (the bound
# parameters of `state__in` do not count); otherwise it walks a much larger index.
_DEAD_SQL = '"jobsite_jobrecord"."state" IN (' + ", ".join(f"'{s}'" for s in DEAD) + ")"


def dead(rows: models.QuerySet[JobRecord]) -> models.QuerySet[JobRecord]:
    """Return the rows of `rows` that ended without success, as their partial indexes see them."""
    return rows.filter(RawSQL(_DEAD_SQL, [], output_field=BooleanField()))


def oldest_waiting(queues: Sequence[str]) -> dict[str, datetime]:
    """Return when the oldest job still waiting in each of `queues` was submitted.

    One pass over the waiting rows (the state index), a minimum per queue; no GROUP BY, which
    SQLite, once ANALYZEd, serves by walking the whole queue index (docs/benchmarks.md).
    """
    names = list(dict.fromkeys(queues))
    if not names:
        return {}
    found = JobRecord.objects.filter(state="submitted").aggregate(
        **{
            f"q{i}": models.Min("submitted_at", filter=models.Q(queue=q))
            for i, q in enumerate(names)
        }
    )
    return {q: found[f"q{i}"] for i, q in enumerate(names) if found[f"q{i}"] is not None}
