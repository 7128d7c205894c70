"""The history at scale: state changes kept in the job's row, a search table, per-minute counts.

Job events move from their own table (a row and three index entries per event) into the
job's `transitions`; the text search gets a table of its own (`JobSearch`, written when the
text changes, with a trigram index on PostgreSQL: pg_trgm, a trusted extension since
PostgreSQL 13); the charts read `MinuteCount`, filled here from the old events. Migration 0004 adds the
PostgreSQL indexes (after this one's deferred index statements have run).
"""

from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

import orjson
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps
from django.db.models.functions import TruncMinute

from jobsite.jobs.history.rows import search_text

CHUNK = 1000


def _transition(event: Any) -> dict[str, Any]:
    return {
        "id": event.event_id,
        "from": event.from_state,
        "to": event.to_state,
        "at_ms": int(event.at.timestamp() * 1000),
        "attempt": event.attempt,
        "worker": event.worker,
        "error": event.error,
    }


def carry_history(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Move events into their jobs' rows, fill the search table and the minute counts."""
    alias = schema_editor.connection.alias
    JobRecord = apps.get_model("jobsite", "JobRecord").objects.using(alias)
    JobEvent = apps.get_model("jobsite", "JobEvent").objects.using(alias)
    JobSearch = apps.get_model("jobsite", "JobSearch")
    MinuteCount = apps.get_model("jobsite", "MinuteCount")
    last = ""
    while chunk := list(JobRecord.filter(id__gt=last).order_by("id")[:CHUNK]):
        last = chunk[-1].id
        changes = defaultdict(list)
        for event in JobEvent.filter(job_id__in=[r.id for r in chunk]).order_by("event_id"):
            if event.from_state != event.to_state:
                changes[event.job_id].append(_transition(event))
        for row in chunk:
            row.transitions = changes.get(row.id, [])
        JobRecord.bulk_update(chunk, ["transitions"])
        texts = [
            JobSearch(
                job_id=row.id,
                text=search_text(
                    row.task,
                    orjson.dumps(row.args).decode(),
                    orjson.dumps(row.kwargs).decode(),
                    row.errors,
                ),
            )
            for row in chunk
        ]
        JobSearch.objects.using(alias).bulk_create(texts, ignore_conflicts=True)
    counts: Counter[tuple[datetime, str, str]] = Counter()
    minutes = JobEvent.exclude(from_state=models.F("to_state")).annotate(m=TruncMinute("at"))
    for minute, queue, state, n in minutes.values_list("m", "queue", "to_state").annotate(
        n=models.Count("id")
    ):
        counts[(minute, queue, state)] += n
    MinuteCount.objects.using(alias).bulk_create(
        [MinuteCount(minute=m, queue=q, state=s, count=n) for (m, q, s), n in counts.items()]
    )


class Migration(migrations.Migration):
    dependencies = [
        ("jobsite", "0002_groups"),
    ]

    operations = [
        migrations.CreateModel(
            name="JobSearch",
            fields=[
                ("job_id", models.CharField(max_length=128, primary_key=True, serialize=False)),
                ("text", models.TextField()),
            ],
            options={
                "verbose_name": "search text",
            },
        ),
        migrations.CreateModel(
            name="MinuteCount",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("minute", models.DateTimeField()),
                ("queue", models.CharField(max_length=100)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("unsubmitted", "unsubmitted"),
                            ("scheduled", "scheduled"),
                            ("blocked", "blocked"),
                            ("submitted", "submitted"),
                            ("started", "started"),
                            ("completed", "completed"),
                            ("failed", "failed"),
                            ("cancelled", "cancelled"),
                            ("stalled", "stalled"),
                            ("dropped", "dropped"),
                            ("expired", "expired"),
                            ("lost", "lost"),
                        ],
                        max_length=16,
                    ),
                ),
                ("count", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.AddConstraint(
            model_name="minutecount",
            constraint=models.UniqueConstraint(
                fields=("minute", "queue", "state"), name="unique_minute_count"
            ),
        ),
        migrations.AddField(
            model_name="jobrecord",
            name="transitions",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.RunPython(carry_history, migrations.RunPython.noop, elidable=True),
        migrations.RemoveConstraint(
            model_name="jobevent",
            name="unique_event_per_queue",
        ),
        migrations.DeleteModel(
            name="JobEvent",
        ),
    ]
