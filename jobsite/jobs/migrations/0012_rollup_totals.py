"""The charts' rollup keeps totals rows (queue and task "") beside the per-queue ones, and an
index on each slice over time; the totals of what was already counted are made here."""

from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps


def add_totals(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    from jobsite.jobs.history.rollup import add_totals

    add_totals(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("jobsite", "0011_job_flows"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="rollupcount",
            index=models.Index(
                fields=["span_s", "queue", "task", "start"], name="jobsite_rollup_slice"
            ),
        ),
        migrations.RunPython(add_totals, migrations.RunPython.noop),
    ]
