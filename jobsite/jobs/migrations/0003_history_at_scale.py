"""The history at scale: a search column, a per-minute rollup, and leaner indexes.

On PostgreSQL it also adds a trigram index on the search column (pg_trgm, a trusted extension
since PostgreSQL 13) and drops the `varchar_pattern_ops` twins Django makes for indexed text
columns, which no query of the app uses (ids are only ever compared whole).
"""

from django.db import migrations, models

from jobsite.jobs.history import search_text

TRIGRAM_INDEX = "jobsite_job_search_trgm"


def backfill_search(apps, schema_editor):
    """Fill the search column of rows mirrored before it existed, in chunks."""
    JobRecord = apps.get_model("jobsite", "JobRecord")
    rows = JobRecord.objects.using(schema_editor.connection.alias).filter(search="")
    fields = ("id", "task", "args", "kwargs", "errors")
    while chunk := list(rows.values_list(*fields)[:2000]):
        for job_id, task, args, kwargs, errors in chunk:
            text = search_text(job_id, task, args, kwargs, errors) or " "
            rows.filter(id=job_id).update(search=text)


def postgres_indexes(apps, schema_editor):
    """Add the trigram index and drop unused LIKE twins (PostgreSQL only)."""
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename LIKE %s AND indexname LIKE %s",
            [r"jobsite\_%", r"%\_like"],
        )
        for (name,) in cursor.fetchall():
            cursor.execute(f"DROP INDEX IF EXISTS {connection.ops.quote_name(name)}")
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        cursor.execute(
            f"CREATE INDEX IF NOT EXISTS {TRIGRAM_INDEX} ON jobsite_jobrecord "
            "USING gin (search gin_trgm_ops)"
        )


def drop_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {TRIGRAM_INDEX}")


class Migration(migrations.Migration):

    dependencies = [
        ('jobsite', '0002_groups'),
    ]

    operations = [
        migrations.CreateModel(
            name='MinuteCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('minute', models.DateTimeField()),
                ('queue', models.CharField(max_length=100)),
                ('state', models.CharField(choices=[('unsubmitted', 'unsubmitted'), ('scheduled', 'scheduled'), ('blocked', 'blocked'), ('submitted', 'submitted'), ('started', 'started'), ('completed', 'completed'), ('failed', 'failed'), ('cancelled', 'cancelled'), ('stalled', 'stalled'), ('dropped', 'dropped'), ('expired', 'expired'), ('lost', 'lost')], max_length=16)),
                ('count', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name='jobrecord',
            name='search',
            field=models.TextField(blank=True, default='', editable=False),
        ),
        migrations.AlterField(
            model_name='jobevent',
            name='job_id',
            field=models.CharField(max_length=128),
        ),
        migrations.AddIndex(
            model_name='jobevent',
            index=models.Index(fields=['job_id', 'event_id'], name='jobsite_event_job'),
        ),
        migrations.AddConstraint(
            model_name='minutecount',
            constraint=models.UniqueConstraint(fields=('minute', 'queue', 'state'), name='unique_minute_count'),
        ),
        migrations.RunPython(backfill_search, migrations.RunPython.noop, elidable=True),
        migrations.RunPython(postgres_indexes, drop_trigram_index),
    ]
