"""The history at scale: text search, per-minute counts, retention, and the indexes it relies on."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
import redis
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Sum
from django.test import Client as WebClient
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from engine import Client, EngineSettings, QueueKeys
from engine.job import by_attribute
from engine.keys import queues_key
from engine.stream.events import Event
from jobsite.jobs.api import live
from jobsite.jobs.history import rows as history
from jobsite.jobs.history.batches import apply_batch
from jobsite.jobs.history.retention import prune
from jobsite.jobs.models import JobRecord, JobSearch, RollupCount
from jobsite.jobs.permissions import VIEWERS
from jobsite.jobs.search import SEARCH_TRIGRAMS, text_search
from tests.engine import tasks as t

from .conftest import make_token, mirror_all, run_worker, staff_user

pytestmark = pytest.mark.django_db(transaction=True)
QUEUES = ["q0", "q1", "q2"]


def run_and_mirror(engine: EngineSettings, jobs: list[Any]) -> list[str]:
    async def go() -> list[str]:
        async with Client(engine) as client:
            ids = [job.id for job in await client.enqueue_many(jobs)]
        await run_worker(engine)
        await mirror_all()
        return ids

    return async_to_sync(go)()


def stream_events(engine: EngineSettings) -> list[Event]:
    """Return every event of the default queue's stream, as the mirror reads them."""
    keys = QueueKeys(engine.prefix, "default")
    with redis.Redis.from_url(engine.redis_url, decode_responses=True) as r:
        return [Event.from_entry("default", i, f) for i, f in r.xrange(keys.events)]


def test_search_finds_arguments_and_error_messages_in_any_case(engine: EngineSettings) -> None:
    t.FAIL_ONCE.clear()
    ok, failed = run_and_mirror(
        engine, [t.add.call(40, 2), t.fails_first_time.call("Order-Quince-77")]
    )
    rows = JobRecord.objects.all()
    assert set(text_search(rows, "order-quince").values_list("id", flat=True)) == {failed}
    found = text_search(rows, "FIRST TIME").values_list("id", flat=True)
    assert list(found) == [failed]  # the error message, not the arguments
    assert list(text_search(rows, ok).values_list("id", flat=True)) == [ok]  # a whole id
    assert not text_search(rows, ok[-12:]).exists()  # ids are not searched by parts
    assert list(text_search(rows, "quince-7").values_list("id", flat=True)) == [failed]
    assert list(text_search(rows, "order quince").values_list("id", flat=True)) == []
    # Mid-word: SQLite scans every text; PostgreSQL looks words up by their start.
    mid = list(text_search(rows, "rder-quince").values_list("id", flat=True))
    assert mid == ([] if connection.vendor == "postgresql" else [failed])
    assert not text_search(rows, "zzqx-no-such-thing").exists()
    assert list(text_search(rows, "ad").values_list("id", flat=True)) == []  # short: whole words
    assert list(text_search(rows, "add").values_list("id", flat=True)) == [ok]


def per_state() -> dict[str, int]:
    minutes = RollupCount.objects.filter(span_s=60, bucket=0).exclude(queue="")  # not totals
    return dict(minutes.values_list("series").order_by().annotate(Sum("count")))


def test_minute_counts_count_each_event_once_across_replays(engine: EngineSettings) -> None:
    run_and_mirror(engine, [t.add.call(i, i) for i in range(5)])
    events = stream_events(engine)
    counted = per_state()
    assert counted["completed"] == 5 and counted["submitted"] == 5
    apply_batch(events, {})  # a replay, as after a crash before the ack
    again = per_state()
    assert again == counted
    assert sum(p["completed"] for p in live.throughput(60)) == 5


def test_retention_prunes_ended_jobs_per_state_and_keeps_the_rest(
    engine: EngineSettings,
) -> None:
    t.FAIL_ONCE.clear()
    ok, failed = run_and_mirror(engine, [t.add.call(1, 1), t.fails_first_time.call("x")])
    async_to_sync(_enqueue_waiting)(engine)
    later = timezone.now() + timedelta(days=31)
    with override_settings(JOBSITE={**_jobsite(), "JOB_RETENTION_DAYS_BY_STATE": {"failed": 90}}):
        assert prune(at=later) == 1
    assert not JobRecord.objects.filter(id=ok).exists()
    assert not JobSearch.objects.filter(job_id=ok).exists()
    assert JobRecord.objects.filter(id=failed).exists()  # failures are kept 90 days
    assert JobRecord.objects.filter(state="submitted").count() == 1  # live rows stay
    forever = {"JOB_RETENTION_DAYS": None, "JOB_RETENTION_DAYS_BY_STATE": {}}
    with override_settings(JOBSITE={**_jobsite(), **forever}):
        assert prune(at=later + timedelta(days=365)) == 0


async def _enqueue_waiting(engine: EngineSettings) -> None:
    async with Client(engine) as client:
        await client.enqueue(t.add, 2, 2)
    await mirror_all()


def _jobsite() -> dict[str, Any]:
    from django.conf import settings

    return dict(settings.JOBSITE)


def test_replayed_events_never_bring_a_pruned_job_back(engine: EngineSettings) -> None:
    tiny_days = 0.5 / 86_400  # half a second
    with override_settings(JOBSITE={**_jobsite(), "JOB_RETENTION_DAYS": tiny_days}):
        (done,) = run_and_mirror(engine, [t.add.call(3, 4)])
        assert JobRecord.objects.filter(id=done).exists()
        time.sleep(0.6)
        assert prune() == 1
        events = stream_events(engine)
        keys = QueueKeys(engine.prefix, "default")
        with redis.Redis.from_url(engine.redis_url, decode_responses=True) as r:
            hashes = {done: dict(by_attribute(r.hgetall(keys.job(done))))}
        apply_batch(events, hashes)  # every event again, with the job hash still in Redis
        apply_batch([e for e in events if e.to_state != "completed"], {})  # live ones alone
    assert not JobRecord.objects.filter(id=done).exists()
    assert not JobSearch.objects.filter(job_id=done).exists()


FIVE_STATES = ("completed", "failed", "submitted", "started", "cancelled")
# As a real history is: nearly every job ended well, a few are live.
MOSTLY_DONE = ("completed",) * 45 + ("failed", "submitted", "started", "cancelled", "scheduled")


def _fill(n: int, states: tuple[str, ...] = FIVE_STATES) -> None:
    """Mirror n jobs (a mix of states, queues and tasks) from made-up events and hashes."""
    now_ms = int(time.time() * 1000)
    hashes, events = {}, []
    for i in range(n):
        job = f"{now_ms + i:012x}{i:020x}"
        state = states[i % len(states)]
        hashes[job] = {
            "id": job,
            "queue": f"q{i % 3}",
            "task": f"task{i % 7}",
            "state": state,
            "args": f'[{i}, "user-{i}"]',
            "submitted_at_ms": str(now_ms - i * 1000),
            "completed_at_ms": str(now_ms - i * 500) if state in history.TERMINAL else "",
        }
        entry = {"job": job, "from": "unsubmitted", "to": state, "at": str(now_ms)}
        events.append(Event.from_entry(f"q{i % 3}", f"{now_ms}-{i}", entry))
    apply_batch(events, hashes)


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_every_hot_query_uses_an_index_on_postgresql(engine: EngineSettings) -> None:
    """Run the API, dashboard, admin and retention queries; EXPLAIN each with seq scans off."""
    _fill(3000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    admin: User = User.objects.create_superuser("root", password="x")
    web, api = WebClient(), {"HTTP_AUTHORIZATION": f"Bearer {make_token(staff_user('v', VIEWERS))}"}
    web.force_login(admin)
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    with CaptureQueriesContext(connection) as seen:
        for query in (
            "",
            "state=failed",
            "queue=q1",
            "task=task3",
            f"since={quote(since)}",
            "q=zzqx-none",
        ):
            assert web.get(f"/api/v1/jobs?{query}", **api).status_code == 200
        assert web.get("/api/v1/stats?minutes=1440", **api).status_code == 200
        for query in ("range=hour", "range=week&queue=q2", "range=day&task=task1"):
            assert web.get(f"/api/v1/charts?{query}", **api).status_code == 200
        for query in ("", "state__exact=failed", "queue=q2", "task=task1", "q=user-12"):
            assert web.get(f"/admin/jobsite/jobrecord/?{query}").status_code == 200
        live._history(live.Filter(state="failed"), QUEUES)
        live._history(live.Filter(q="user-5"), QUEUES)
        prune(at=timezone.now() + timedelta(days=400))
    tables = ("jobsite_jobrecord", "jobsite_jobsearch", "jobsite_rollupcount", "jobsite_queuedepth")
    hot = [q["sql"] for q in seen.captured_queries if q["sql"].startswith("SELECT")]
    hot = [sql for sql in hot if any(table in sql for table in tables)]
    assert len(hot) > 15
    plans = {}
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        for sql in hot:
            cursor.execute("EXPLAIN " + sql)
            plans[sql] = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("RESET enable_seqscan")
    scans = {sql: plan for sql, plan in plans.items() if "Seq Scan on jobsite_" in plan}
    assert not scans, scans
    # A search matching nothing must not walk the table: only the words index can answer it
    # without reading every row. (A common word may rightly walk the date index instead.)
    rare = [sql for sql in hot if "zzqx-none" in sql]
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off; SET enable_indexscan = off")
        for sql in rare:
            cursor.execute("EXPLAIN " + sql)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert "Bitmap Index Scan on jobsite_search_words" in plan, plan
        cursor.execute("RESET enable_seqscan; RESET enable_indexscan")
    assert rare


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_no_unlimited_query_walks_a_whole_table_or_index_on_sqlite(engine: EngineSettings) -> None:
    """ANALYZEd on a history where most jobs completed, SQLite's planner once served "oldest
    waiting job per queue" by walking the whole queue index (1.1 s at 1 M rows), a job's
    replays by scanning the table and the newest failures by sorting every failure (their
    partial indexes went unused): queries without a LIMIT must search an index, never scan."""
    _fill(3000, MOSTLY_DONE)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    with redis.Redis.from_url(engine.redis_url) as r:
        r.sadd(queues_key(engine.prefix), *QUEUES)
    failed = JobRecord.objects.filter(state="failed").values_list("id", flat=True).first()
    web, api = WebClient(), {"HTTP_AUTHORIZATION": f"Bearer {make_token(staff_user('v', VIEWERS))}"}
    ran: list[tuple[str, Any]] = []  # as executed: bound parameters are not constants to SQLite

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        ran.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        assert web.get("/api/v1/queues", **api).status_code == 200
        assert web.get(f"/api/v1/jobs/{failed}", **api).status_code == 200
        snapshot = live._history(live.Filter(), QUEUES)
    assert set(snapshot["oldest_waiting_s"]) == set(QUEUES)
    tables = ("jobsite_jobrecord", "jobsite_jobsearch")
    hot = [(sql, p) for sql, p in ran if sql.startswith("SELECT") and any(t in sql for t in tables)]
    newest_failures = [q for q in hot if '"completed_at" DESC LIMIT' in q[0]]
    hot = [q for q in hot if " LIMIT " not in q[0]]
    assert len(hot) >= 3 and len(newest_failures) == 1
    with connection.cursor() as cursor:
        for sql, params in hot:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            steps = [row[-1] for row in cursor.fetchall()]
            assert not [s for s in steps if s.startswith("SCAN jobsite_")], (sql, steps)
        # The newest failures walk the partial index of dead rows, not every failure sorted.
        cursor.execute("EXPLAIN QUERY PLAN " + newest_failures[0][0], newest_failures[0][1])
        steps = [row[-1] for row in cursor.fetchall()]
        assert steps == ["SCAN jobsite_jobrecord USING INDEX jobsite_job_dead"], steps


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_sqlite_search_reads_a_trigram_index_that_triggers_keep_in_step() -> None:
    """SQLite finds substrings through its FTS5 trigram index, not a scan; triggers keep the
    index equal to the texts through inserts, updates and retention's deletes."""
    _fill(300)

    def numbers_found(text: str) -> list[int]:
        rows = text_search(JobRecord.objects.all(), text)
        return sorted(args[0] for args in rows.values_list("args", flat=True))

    with CaptureQueriesContext(connection) as seen:
        assert numbers_found("USER-12") == [12, *range(120, 130)]
    assert numbers_found("ser-29") == [29, *range(290, 300)]  # any substring, any case
    sql = next(q["sql"] for q in seen.captured_queries if "MATCH" in q["sql"])
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        assert any("VIRTUAL TABLE" in row[-1] for row in cursor.fetchall())
    first_ten = [f"{i:020x}" for i in range(10)]
    JobSearch.objects.filter(job_id__regex="|".join(f"{x}$" for x in first_ten)).update(
        text="renamed"
    )
    assert numbers_found("renamed") == list(range(10))
    prune(at=timezone.now() + timedelta(days=400))  # ended jobs go, with their texts
    with connection.cursor() as cursor:  # raises when the index and the texts disagree
        cursor.execute(
            f"INSERT INTO {SEARCH_TRIGRAMS} ({SEARCH_TRIGRAMS}) VALUES ('integrity-check')"
        )
    assert numbers_found("renamed") == [2, 3, 7, 8]  # the live ones (submitted, started)


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_job_pages_keep_room_for_state_changes_on_postgresql() -> None:
    """The job table leaves 30 % of each page free, so changes stay on their page."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'jobsite_jobrecord'")
        (options,) = cursor.fetchone()
    assert "fillfactor=70" in (options or []), options
