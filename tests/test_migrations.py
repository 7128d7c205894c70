"""Upgrading a database made under the app's old label ("jobs"; models Job, Worker, Queue).

`fixtures/jobs-0002.sql` is a SQLite dump of such a database with rows in every table, a user in
"Jobsite viewers", a scoped API token and an admin log entry; `migrate` must keep all of it.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from pathlib import Path

from tests.test_django_project import manage, project_env

DUMP = Path(__file__).parent / "jobsite" / "fixtures" / "jobs-0002.sql"

READ_BACK = """
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from jobsite.jobs.models import (
    ApiToken, JobRecord, JobSearch, OutboxEntry, QueueRecord, RollupCount, WorkerRecord
)
from jobsite.jobs.search import text_search
from jobsite.jobs.permissions import Perm, user_allows
import json
user = User.objects.get(username="olduser")
entry = LogEntry.objects.get()
minutes = RollupCount.objects.filter(span_s=60)
print(json.dumps({
    "job": [JobRecord.objects.get(id="old-1").result, JobRecord.objects.count()],
    "events": [(t["from"], t["to"]) for t in JobRecord.objects.get(id="old-1").transitions],
    "found": list(text_search(JobRecord.objects.all(), "add").values_list("id", flat=True)),
    "minutes": sum(minutes.exclude(queue="").values_list("count", flat=True)),
    "minute_totals": sum(minutes.filter(queue="").values_list("count", flat=True)),
    "queue_paused": QueueRecord.objects.get(name="default").paused,
    "workers": list(WorkerRecord.objects.values_list("id", flat=True)),
    "outbox": OutboxEntry.objects.count(),
    "token": ApiToken.objects.get(name="t").permissions,
    "may_view": user_allows(user, Perm.VIEW),
    "may_cancel": user_allows(user, Perm.CANCEL),
    "log_entry_object": str(entry.get_edited_object().id),
}))
"""


def test_a_database_from_the_old_label_keeps_every_row(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite3"
    with sqlite3.connect(db) as connection:
        connection.executescript(DUMP.read_text())
    env = project_env(DJANGO_SECRET_KEY=secrets.token_urlsafe(50), DATABASE_URL=f"sqlite:///{db}")
    migrated = manage(env, "migrate", "--no-input")
    assert migrated.returncode == 0, migrated.stderr
    with sqlite3.connect(db) as connection:
        tables = {
            r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        indexes = {
            r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='index'")
        }
        labels = {r[0] for r in connection.execute("SELECT app_label FROM django_content_type")}
        stale = connection.execute("SELECT count(*) FROM django_migrations WHERE app='jobs'")
        assert stale.fetchone()[0] == 0
    assert not {t for t in tables if t.startswith("jobs_")}
    assert {"jobsite_jobrecord", "jobsite_jobsearch", "jobsite_apitoken"} <= tables
    assert "jobsite_jobevent" not in tables  # its rows moved into the jobs' transitions
    assert "jobs" not in labels and "jobsite" in labels
    # 0005 removes the adopted indexes by the names 0001 gave them, then adds its own
    assert "jobsite_job_queue_submitted" in indexes
    read = manage(env, "shell", "-c", READ_BACK)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout.strip().splitlines()[-1]) == {
        "job": [3, 1],
        "events": [["submitted", "completed"]],
        "found": ["old-1"],
        "minutes": 1,
        "minute_totals": 1,  # 0012 makes the totals rows
        "queue_paused": True,
        "workers": ["w1"],
        "outbox": 1,
        "token": ["view_jobrecord", "add_jobrecord", "cancel_job", "change_queuerecord"],
        "may_view": True,  # the group kept its (renamed) permissions
        "may_cancel": False,
        "log_entry_object": "old-1",
    }
    check = manage(env, "makemigrations", "--check", "--dry-run")
    assert check.returncode == 0, check.stdout + check.stderr
