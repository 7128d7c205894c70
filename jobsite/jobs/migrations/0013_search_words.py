"""PostgreSQL only: the text search looks words up in a full-text GIN index instead of trigrams.

A trigram index reads the posting lists of trigrams that nearly every row has ("use", "ser" for
"user-4567"): about 200 ms a search at 10 million jobs. The words index finds the same jobs in
a few milliseconds, and costs the mirror fewer index entries per job.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from jobsite.jobs.search import SEARCH_WORDS_INDEX, SEARCH_WORDS_SQL

TRIGRAM_INDEX = "jobsite_search_trgm"


def words_index(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {SEARCH_WORDS_INDEX} ON jobsite_jobsearch"
        f" USING gin ({SEARCH_WORDS_SQL})"
    )
    schema_editor.execute(f"DROP INDEX IF EXISTS {TRIGRAM_INDEX}")


def trigram_index(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {TRIGRAM_INDEX} ON jobsite_jobsearch"
        " USING gin (text gin_trgm_ops)"
    )
    schema_editor.execute(f"DROP INDEX IF EXISTS {SEARCH_WORDS_INDEX}")


class Migration(migrations.Migration):
    dependencies = [
        ("jobsite", "0012_rollup_totals"),
    ]

    operations = [
        migrations.RunPython(words_index, trigram_index),
    ]
