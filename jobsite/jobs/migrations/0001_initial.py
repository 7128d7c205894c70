"""The app's tables under the label "jobsite", created, or adopted from the old "jobs" label.

Databases made before the app was renamed (label "jobs"; models Job, Worker, Queue) keep their
rows: their tables, indexes, content types, permissions (so groups and users keep their rights),
admin log entries and API token scopes move to the new names instead of being created afresh.
"""

from typing import Any, cast

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

# New model name -> (old table, old model name).
OLD = {
    "jobrecord": ("jobs_job", "job"),
    "jobevent": ("jobs_jobevent", "jobevent"),
    "workerrecord": ("jobs_worker", "worker"),
    "queuerecord": ("jobs_queue", "queue"),
    "outboxentry": ("jobs_outboxentry", "outboxentry"),
    "apitoken": ("jobs_apitoken", "apitoken"),
}
# The old label's last migration: older schemas must upgrade to it before this one.
OLD_LAST = "0002_token_scope_and_groups"


def _old_migrations(connection: BaseDatabaseWrapper) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM django_migrations WHERE app = %s", ["jobs"])
        return {name for (name,) in cursor.fetchall()}


def _rename_indexes(schema_editor: BaseDatabaseSchemaEditor, model: type[models.Model]) -> None:
    """Give the adopted table's indexes the names this state expects (found by columns)."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, model._meta.db_table)
    for index in model._meta.indexes:
        # (an index names the model's own fields, never a reverse relation)
        columns = [cast("models.Field[Any, Any]", model._meta.get_field(name)).column for name in index.fields]
        for name, info in found.items():
            plain = info["index"] and not info["unique"] and not info["primary_key"]
            if plain and info["columns"] == columns and name != index.name:
                old = models.Index(fields=index.fields, name=name)
                schema_editor.rename_index(model, old, index)


def _move_names(apps: StateApps) -> None:
    """Move content types, permissions and token scopes from the old label to this one."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    ApiToken = apps.get_model("jobsite", "ApiToken")
    codenames: dict[str, str] = {}
    for new, (_, old) in OLD.items():
        if ContentType.objects.filter(app_label="jobsite", model=new).exists():
            continue
        moved = ContentType.objects.filter(app_label="jobs", model=old).update(
            app_label="jobsite", model=new
        )
        if not moved or new == old:
            continue
        for action in ("add", "change", "delete", "view"):
            codenames[f"{action}_{old}"] = f"{action}_{new}"
            Permission.objects.filter(
                content_type__app_label="jobsite", codename=f"{action}_{old}"
            ).update(codename=f"{action}_{new}", name=f"Can {action} {new.replace('record', ' record')}")
    for token in ApiToken.objects.exclude(permissions=[]):
        token.permissions = [codenames.get(p, p) for p in token.permissions]
        token.save(update_fields=["permissions"])


def create_or_adopt(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    connection = schema_editor.connection
    adopting = "jobs_job" in connection.introspection.table_names()
    if adopting and OLD_LAST not in _old_migrations(connection):
        raise RuntimeError(
            "this database holds Jobsite tables under the old label 'jobs' from before "
            f"migration jobs.{OLD_LAST}: migrate with the release that has it first"
        )
    for model in apps.get_models():
        if model._meta.app_label != "jobsite":
            continue
        if adopting:
            schema_editor.alter_db_table(model, OLD[cast(str, model._meta.model_name)][0], model._meta.db_table)
            _rename_indexes(schema_editor, model)
        else:
            schema_editor.create_model(model)
    if adopting:
        _move_names(apps)
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM django_migrations WHERE app = %s", ["jobs"])


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='OutboxEntry',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('job_id', models.CharField(max_length=128, unique=True)),
                        ('queue', models.CharField(max_length=100)),
                        ('job', models.JSONField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('pushed_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                    ],
                ),
                migrations.CreateModel(
                    name='QueueRecord',
                    fields=[
                        ('name', models.CharField(max_length=100, primary_key=True, serialize=False)),
                        ('paused', models.BooleanField(default=False)),
                        ('submitted', models.IntegerField(default=0)),
                        ('scheduled', models.IntegerField(default=0)),
                        ('started', models.IntegerField(default=0)),
                        ('dlq', models.IntegerField(default=0)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        'verbose_name': 'queue',
                    },
                ),
                migrations.CreateModel(
                    name='WorkerRecord',
                    fields=[
                        ('id', models.CharField(max_length=200, primary_key=True, serialize=False)),
                        ('host', models.CharField(max_length=200)),
                        ('pid', models.IntegerField()),
                        ('queues', models.CharField(max_length=500)),
                        ('concurrency', models.IntegerField()),
                        ('current_jobs', models.JSONField(default=list)),
                        ('started_at', models.DateTimeField()),
                        ('heartbeat_at', models.DateTimeField()),
                    ],
                    options={
                        'verbose_name': 'worker',
                    },
                ),
                migrations.CreateModel(
                    name='ApiToken',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100)),
                        ('prefix', models.CharField(editable=False, max_length=8)),
                        ('key_hash', models.CharField(editable=False, max_length=64, unique=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('expires_at', models.DateTimeField(blank=True, null=True)),
                        ('permissions', models.JSONField(blank=True, default=list)),
                        ('queues', models.JSONField(blank=True, default=list)),
                        ('revoked_at', models.DateTimeField(blank=True, null=True)),
                        ('last_used_at', models.DateTimeField(blank=True, null=True)),
                        ('user', models.ForeignKey(editable=False, on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL)),
                    ],
                ),
                migrations.CreateModel(
                    name='JobEvent',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('queue', models.CharField(max_length=100)),
                        ('event_id', models.CharField(max_length=40)),
                        ('job_id', models.CharField(db_index=True, max_length=128)),
                        ('from_state', models.CharField(max_length=16)),
                        ('to_state', models.CharField(max_length=16)),
                        ('at', models.DateTimeField()),
                        ('attempt', models.IntegerField(default=0)),
                        ('worker', models.CharField(blank=True, default='', max_length=200)),
                        ('error', models.TextField(blank=True, default='')),
                        ('progress', models.FloatField(blank=True, null=True)),
                    ],
                    options={
                        'ordering': ['event_id'],
                        'constraints': [models.UniqueConstraint(fields=('queue', 'event_id'), name='unique_event_per_queue')],
                    },
                ),
                migrations.CreateModel(
                    name='JobRecord',
                    fields=[
                        ('id', models.CharField(max_length=128, primary_key=True, serialize=False)),
                        ('queue', models.CharField(max_length=100)),
                        ('task', models.CharField(max_length=255)),
                        ('version', models.IntegerField(default=1)),
                        ('state', models.CharField(choices=[('unsubmitted', 'unsubmitted'), ('scheduled', 'scheduled'), ('blocked', 'blocked'), ('submitted', 'submitted'), ('started', 'started'), ('completed', 'completed'), ('failed', 'failed'), ('cancelled', 'cancelled'), ('stalled', 'stalled'), ('dropped', 'dropped'), ('expired', 'expired'), ('lost', 'lost')], max_length=16)),
                        ('priority', models.IntegerField(default=0)),
                        ('attempt', models.IntegerField(default=0)),
                        ('args', models.JSONField(blank=True, default=list)),
                        ('kwargs', models.JSONField(blank=True, default=dict)),
                        ('result', models.JSONField(blank=True, null=True)),
                        ('errors', models.JSONField(blank=True, default=list)),
                        ('progress', models.FloatField(blank=True, null=True)),
                        ('progress_message', models.CharField(blank=True, default='', max_length=500)),
                        ('worker', models.CharField(blank=True, default='', max_length=200)),
                        ('sent_at', models.DateTimeField(blank=True, null=True)),
                        ('submitted_at', models.DateTimeField(blank=True, db_index=True, null=True)),
                        ('claimed_at', models.DateTimeField(blank=True, null=True)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('retried_at', models.DateTimeField(blank=True, null=True)),
                        ('heartbeat_at', models.DateTimeField(blank=True, null=True)),
                        ('completed_at', models.DateTimeField(blank=True, null=True)),
                        ('run_at', models.DateTimeField(blank=True, null=True)),
                        ('last_event_id', models.CharField(default='', max_length=40)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        'verbose_name': 'job',
                        'ordering': ['-submitted_at'],
                        'permissions': [('cancel_job', 'Can cancel jobs'), ('retry_job', 'Can retry jobs and resubmit them from the DLQ'), ('purge_job', 'Can purge finished jobs')],
                        'indexes': [models.Index(fields=['queue', 'state'], name='jobsite_job_queue_f7bde4_idx'), models.Index(fields=['task', 'state'], name='jobsite_job_task_15186e_idx'), models.Index(fields=['state', 'completed_at'], name='jobsite_job_state_c40743_idx')],
                    },
                ),
            ],
        ),
        # Tables are made (or adopted) here, from the state above.
        migrations.RunPython(create_or_adopt, migrations.RunPython.noop),
    ]
