"""The charts' rollup: per slot (1 minute, 15 minutes, 1 hour), queue and task, with retries and
wait and run time histograms (`RollupCount`), and queue depth samples (`QueueDepth`).

`MinuteCount` (per minute, queue and state) is folded into the new table, its counts under the
task "" (unknown) in every span, then dropped.
"""

from collections import Counter
from datetime import datetime

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

SPANS_S = (60, 900, 3600)


def copy_minutes(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    alias = schema_editor.connection.alias
    MinuteCount = apps.get_model("jobsite", "MinuteCount")
    RollupCount = apps.get_model("jobsite", "RollupCount")
    rows: Counter[tuple[int, datetime, str, str]] = Counter()
    for minute, queue, state, n in MinuteCount.objects.using(alias).values_list(
        "minute", "queue", "state", "count"
    ):
        seconds = int(minute.timestamp())
        for span_s in SPANS_S:
            start = minute.fromtimestamp(seconds - seconds % span_s, tz=minute.tzinfo)
            rows[(span_s, start, queue, state)] += n
    RollupCount.objects.using(alias).bulk_create(
        [
            RollupCount(span_s=s, start=at, queue=q, task="", series=state, bucket=0, count=n)
            for (s, at, q, state), n in rows.items()
        ],
        batch_size=1000,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("jobsite", "0009_triage"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueDepth",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("minute", models.DateTimeField()),
                ("queue", models.CharField(max_length=100)),
                ("waiting", models.IntegerField(default=0)),
                ("scheduled", models.IntegerField(default=0)),
                ("running", models.IntegerField(default=0)),
            ],
            options={"verbose_name": "queue depth sample"},
        ),
        migrations.CreateModel(
            name="RollupCount",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("span_s", models.IntegerField()),
                ("start", models.DateTimeField()),
                ("queue", models.CharField(max_length=100)),
                ("task", models.CharField(max_length=255)),
                ("series", models.CharField(max_length=16)),
                ("bucket", models.SmallIntegerField(default=0)),
                ("count", models.BigIntegerField(default=0)),
            ],
            options={"verbose_name": "rollup count"},
        ),
        migrations.AddConstraint(
            model_name="queuedepth",
            constraint=models.UniqueConstraint(
                fields=("minute", "queue"), name="unique_queue_depth"
            ),
        ),
        migrations.AddConstraint(
            model_name="rollupcount",
            constraint=models.UniqueConstraint(
                fields=("span_s", "start", "queue", "task", "series", "bucket"),
                name="unique_rollup_count",
            ),
        ),
        migrations.RunPython(copy_minutes, migrations.RunPython.noop),
        migrations.RemoveConstraint(model_name="minutecount", name="unique_minute_count"),
        migrations.DeleteModel(name="MinuteCount"),
    ]
