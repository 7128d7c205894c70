"""PostgreSQL only: a trigram index for the text search, and no unused LIKE twins.

pg_trgm is a trusted extension since PostgreSQL 13 (the database owner may create it). The
`varchar_pattern_ops` twins Django makes for indexed text columns are dropped: no query of the
app uses LIKE on them (ids are only ever compared whole); each costs a write per row change.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TRIGRAM_INDEX = "jobsite_search_trgm"


def postgres_indexes(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
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
            f"CREATE INDEX IF NOT EXISTS {TRIGRAM_INDEX} ON jobsite_jobsearch "
            "USING gin (text gin_trgm_ops)"
        )


def drop_trigram_index(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {TRIGRAM_INDEX}")


class Migration(migrations.Migration):
    dependencies = [
        ("jobsite", "0003_history_at_scale"),
    ]

    operations = [
        migrations.RunPython(postgres_indexes, drop_trigram_index),
    ]
