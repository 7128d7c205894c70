"""The charts' rollup (mirror -> RollupCount), depth samples and GET /api/v1/charts."""

from __future__ import annotations

import time
from datetime import timedelta
from itertools import count
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import Sum
from django.test import Client as WebClient
from django.utils import timezone

from engine import EngineSettings
from engine.stream.events import Event, sortable_id
from jobsite.jobs import services
from jobsite.jobs.history.batches import apply_batch
from jobsite.jobs.history.charts import sample_depth
from jobsite.jobs.history.retention import prune
from jobsite.jobs.history.rollup import (
    SPANS_S,
    TOTAL,
    add_totals,
    bucket_bounds_ms,
    bucket_of,
    percentile,
)
from jobsite.jobs.models import QueueDepth, RollupCount
from jobsite.jobs.permissions import VIEWERS
from tests.engine import tasks as t

from .conftest import make_token, staff_user

pytestmark = pytest.mark.django_db(transaction=True)
SEQ = count(1)


def event(queue: str, job: str, came: str, went: str, at_ms: int, attempt: int = 0) -> Event:
    entry = f"{at_ms}-{next(SEQ)}"
    return Event(queue, sortable_id(entry), job, came, went, at_ms, attempt, "w1", "")


def life(
    job: str, at_ms: int, wait_ms: int, run_ms: int, end: str = "completed", queue: str = "default"
) -> list[Event]:
    """Return the events of one job: submitted, claimed after `wait_ms`, ended after `run_ms`."""
    return [
        event(queue, job, "", "submitted", at_ms),
        event(queue, job, "submitted", "started", at_ms + wait_ms, 1),
        event(queue, job, "started", end, at_ms + wait_ms + run_ms, 1),
    ]


def hash_of(job: str, task: str, queue: str = "default") -> dict[str, str]:
    return {"id": job, "queue": queue, "task": task, "state": "completed"}


def totals(span_s: int = 60, **match: Any) -> dict[str, int]:
    rows = RollupCount.objects.filter(span_s=span_s, bucket=0, **match)
    return dict(rows.values_list("series").order_by().annotate(Sum("count")))


def hist(series: str, task: str, span_s: int = 60) -> dict[int, int]:
    rows = RollupCount.objects.filter(span_s=span_s, series=series, task=task)
    return dict(rows.values_list("bucket").order_by().annotate(Sum("count")))


def minutes_ago(n: float) -> int:
    return int(time.time() * 1000 - n * 60_000)


# Pure: buckets and percentiles.


def test_buckets_are_log_scale_and_hold_their_values() -> None:
    for ms in (0.2, 1, 3, 10, 99, 1000, 12_345, 3_600_000):
        low, high = bucket_bounds_ms(bucket_of(ms))
        assert low <= ms < high or bucket_of(ms) == 0
    assert bucket_of(0) == bucket_of(0.9) == 0
    assert bucket_of(-5) == 0  # clocks of two hosts may disagree
    assert bucket_of(2000) - bucket_of(1000) == 4  # four buckets per doubling


def test_percentiles_from_buckets_are_within_one_bucket_of_the_exact_value() -> None:
    durations = [10 * (i + 1) for i in range(100)]  # 10 ms .. 1000 ms
    buckets: dict[int, int] = {}
    for ms in durations:
        buckets[bucket_of(ms)] = buckets.get(bucket_of(ms), 0) + 1
    for q, exact in ((0.5, 500), (0.95, 950), (0.99, 990)):
        got = percentile(buckets, q)
        assert got is not None and abs(got - exact) / exact < 0.19, (q, got)
    assert percentile({}, 0.5) is None


# The rollup through the mirror (apply_batch), on SQLite and PostgreSQL.


def test_rollup_counts_per_task_with_wait_and_run_percentiles() -> None:
    base = minutes_ago(30)
    events: list[Event] = []
    hashes: dict[str, dict[str, str]] = {}
    for i in range(20):  # task a: waits 10..200 ms, runs 1 s; task b: waits 5 s, fails after 50 ms
        events += life(f"a{i}", base + i, wait_ms=10 * (i + 1), run_ms=1000)
        hashes[f"a{i}"] = hash_of(f"a{i}", "app.a")
    for i in range(5):
        events += life(f"b{i}", base + i, wait_ms=5000, run_ms=50, end="failed")
        hashes[f"b{i}"] = hash_of(f"b{i}", "app.b")
    apply_batch(events, hashes)
    a, b = totals(task="app.a"), totals(task="app.b")
    assert a["completed"] == 20 and a.get("failed", 0) == 0 and a["submitted"] == 20
    assert b["failed"] == 5 and b.get("completed", 0) == 0
    wait_a = percentile(hist("wait", "app.a"), 0.5)
    assert wait_a is not None and abs(wait_a - 100) / 100 < 0.19
    p95 = percentile(hist("wait", "app.a"), 0.95)
    assert p95 is not None and abs(p95 - 190) / 190 < 0.19
    run_b = percentile(hist("run", "app.b"), 0.95)
    assert run_b is not None and abs(run_b - 50) / 50 < 0.19
    assert sum(hist("run", "app.a").values()) == 20
    for span_s in SPANS_S:  # every span holds the same totals
        assert totals(span_s, task="app.a") == a
        assert sum(hist("wait", "app.b", span_s).values()) == 5


def test_retried_attempts_are_counted_and_each_attempt_timed() -> None:
    at = minutes_ago(20)
    job = "r1"
    events = [
        event("default", job, "", "submitted", at),
        event("default", job, "submitted", "started", at + 100, 1),
        event("default", job, "started", "scheduled", at + 400, 1),  # retry with a delay
        event("default", job, "scheduled", "submitted", at + 2400),
        event("default", job, "submitted", "started", at + 2420, 2),
        event("default", job, "started", "submitted", at + 2500, 2),  # retry at once
        event("default", job, "submitted", "started", at + 2600, 3),
        event("default", job, "started", "completed", at + 3600, 3),
    ]
    apply_batch(events, {job: hash_of(job, "app.flaky")})
    counted = totals(task="app.flaky")
    assert counted["retried"] == 2 and counted["completed"] == 1 and counted["started"] == 3
    waits, runs = hist("wait", "app.flaky"), hist("run", "app.flaky")
    assert sum(waits.values()) == 3 and sum(runs.values()) == 3
    assert set(waits) == {bucket_of(100), bucket_of(20)}  # from ready (not from the retry)
    assert set(runs) == {bucket_of(300), bucket_of(80), bucket_of(1000)}


def test_replaying_the_same_events_counts_them_once() -> None:
    at = minutes_ago(10)
    events = life("x1", at, 30, 200) + life("x2", at, 40, 300, end="failed")
    hashes = {j: hash_of(j, "app.x") for j in ("x1", "x2")}
    apply_batch(events, hashes)
    before = list(RollupCount.objects.order_by("id").values_list("span_s", "series", "count"))
    apply_batch(events, hashes)  # the mirror crashed before its ack: the batch comes again
    apply_batch(events[1:4], {})  # part of it again, hashes gone
    after = list(RollupCount.objects.order_by("id").values_list("span_s", "series", "count"))
    assert after == before
    assert totals(task="app.x") == {"submitted": 2, "started": 2, "completed": 1, "failed": 1}


def test_an_attempt_split_across_batches_is_timed_and_keeps_its_task_without_a_hash() -> None:
    at = minutes_ago(5)
    first, second = life("s1", at, 70, 2500)[:2], life("s1", at, 70, 2500)[2:]
    apply_batch(first, {"s1": hash_of("s1", "app.split")})
    apply_batch(second, {})  # the job hash expired: the task comes from the row
    assert totals(task="app.split")["completed"] == 1
    assert set(hist("run", "app.split")) == {bucket_of(2500)}


def test_retention_prunes_fine_slots_before_hourly_ones() -> None:
    apply_batch(life("old", minutes_ago(3 * 24 * 60), 10, 10), {"old": hash_of("old", "app.o")})
    assert RollupCount.objects.filter(span_s=60).exists()
    prune()
    assert not RollupCount.objects.filter(span_s=60).exists()  # minutes: kept 2 days
    assert RollupCount.objects.filter(span_s=900).exists()  # 15 minutes: 8 days
    assert RollupCount.objects.filter(span_s=3600).exists()
    prune(at=timezone.now() + timedelta(days=400))
    assert not RollupCount.objects.exists()


# Depth samples and the API.


def test_depth_is_sampled_once_a_minute_per_queue(engine: EngineSettings) -> None:
    for i in range(3):
        services.enqueue(t.add, i, i)
    services.enqueue(t.add.using(delay_s=600), 1, 1)
    assert sample_depth() == 1
    assert sample_depth(["idle"]) == 2  # again in the same minute: replaced, not added
    row = QueueDepth.objects.get(queue="default")
    assert (row.waiting, row.scheduled, row.running) == (3, 1, 0)
    idle = QueueDepth.objects.get(queue="idle")  # a queue runworker serves, with no job yet
    assert (idle.waiting, idle.scheduled, idle.running) == (0, 0, 0)


def test_runworker_samples_depth_in_its_depth_loop(engine: EngineSettings) -> None:
    services.enqueue(t.add.using(delay_s=600), 1, 1)  # on default, which this worker does not run
    call_command("runworker", "--burst", "--only", "worker,depth", "--queues", "spare")
    sampled = dict(QueueDepth.objects.values_list("queue", "scheduled"))
    assert sampled == {"default": 1, "spare": 0}  # every known queue, and the ones it serves


def api_get(web: WebClient, token: str, query: str) -> Any:
    return web.get(f"/api/v1/charts?{query}", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_the_charts_api_gives_every_series_per_range_queue_and_task(
    engine: EngineSettings, token: str
) -> None:
    base = minutes_ago(3)
    events = life("c1", base, 100, 400) + life("c2", base, 100, 400, end="failed")
    events += life("c3", base, 2000, 50, queue="other")
    hashes = {"c1": hash_of("c1", "app.c"), "c2": hash_of("c2", "app.c")}
    hashes["c3"] = hash_of("c3", "app.d", queue="other")
    apply_batch(events, hashes)
    services.enqueue(t.add, 1, 1)
    sample_depth()
    web = WebClient()
    hour = api_get(web, token, "range=hour").json()
    assert hour["step_s"] == 60 and len(hour["t"]) == 60
    assert sum(hour["throughput"]["completed"]) == 2 and sum(hour["throughput"]["failed"]) == 1
    assert hour["wait"]["count"] == 3 and hour["run"]["count"] == 3
    assert hour["queues"] == ["default", "other"] and hour["tasks"] == ["app.c", "app.d"]
    assert hour["depth"]["waiting"][-1] == 1
    only = api_get(web, token, "range=hour&queue=default&task=app.c").json()
    assert sum(only["throughput"]["completed"]) == 1 and sum(only["throughput"]["failed"]) == 1
    p50 = only["wait"]["overall"]["p50"]
    assert p50 is not None and abs(p50 - 100) / 100 < 0.19
    for name, points, step in (("day", 96, 900), ("week", 168, 3600)):
        answer = api_get(web, token, f"range={name}").json()
        assert (len(answer["t"]), answer["step_s"]) == (points, step)
        assert sum(answer["throughput"]["completed"]) == 2
    bad = api_get(web, token, "range=month")
    assert bad.status_code == 422 and "detail" in bad.json()
    assert api_get(web, token, "queue=../x").status_code == 422


def test_the_depths_last_point_is_the_queues_tables_read(
    engine: EngineSettings, token: str
) -> None:
    sample_depth()  # a sample of the empty queue this minute: the chart alone would say 0
    for i in range(4):
        services.enqueue(t.add, i, i)
    services.enqueue(t.add.using(delay_s=600), 1, 1)
    # A queue outside JOBSITE["QUEUES"], straight through the engine.
    services.run_engine(lambda c: c.enqueue(t.add.using(queue="other"), 1, 1))
    web = WebClient()
    chart = api_get(web, token, "range=hour").json()["depth"]
    queues = web.get("/api/v1/queues", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    waiting = sum(q["counts"]["submitted"] for q in queues)
    assert chart["waiting"][-1] == waiting == 5 and chart["scheduled"][-1] == 1
    assert chart["waiting"][-2] is None  # the points before stay the samples (none taken)
    one = api_get(web, token, "range=day&queue=default").json()["depth"]
    assert (one["waiting"][-1], one["scheduled"][-1], one["running"][-1]) == (4, 1, 0)
    scoped = make_token(staff_user("other-only", VIEWERS), queues=["other"])
    assert api_get(web, scoped, "range=hour").json()["depth"]["waiting"][-1] == 1


def test_a_queue_scoped_token_sees_only_its_queues(engine: EngineSettings) -> None:
    apply_batch(life("q1", minutes_ago(2), 5, 5), {"q1": hash_of("q1", "app.q")})
    other = life("q2", minutes_ago(2), 5, 5, queue="other")
    apply_batch(other, {"q2": hash_of("q2", "app.secret", queue="other")})
    scoped = make_token(staff_user("scoped", VIEWERS), queues=["default"])
    web = WebClient()
    mine = api_get(web, scoped, "range=hour").json()
    assert mine["queues"] == ["default"] and mine["tasks"] == ["app.q"]
    assert sum(mine["throughput"]["completed"]) == 1
    refused = api_get(web, scoped, "queue=other")
    assert refused.status_code == 403 and "other" in refused.json()["detail"]
    nobody = make_token(staff_user("nobody"))
    assert api_get(web, nobody, "range=hour").status_code == 403
    # The per-minute stats count the caller's queues too (every queue: the totals rows).
    everyone = make_token(staff_user("everyone", VIEWERS))
    for key, completed in ((scoped, 1), (everyone, 2)):
        stats = web.get("/api/v1/stats?minutes=10", HTTP_AUTHORIZATION=f"Bearer {key}").json()
        assert sum(point["completed"] for point in stats) == completed


def test_totals_rows_hold_the_sum_of_every_queue_and_are_remade_from_them() -> None:
    at = minutes_ago(4)
    events = life("t1", at, 10, 20) + life("t2", at, 30, 40, queue="other", end="failed")
    apply_batch(events, {"t1": hash_of("t1", "app.t"), "t2": hash_of("t2", "app.u", "other")})

    def by_slot(**match: Any) -> dict[tuple[Any, ...], int]:
        rows = RollupCount.objects.filter(**match).values("span_s", "start", "series", "bucket")
        summed = rows.order_by().annotate(n=Sum("count"))
        return {(r["span_s"], r["start"], r["series"], r["bucket"]): r["n"] for r in summed}

    made = by_slot(queue=TOTAL, task=TOTAL)
    assert made and made == by_slot(queue__in=["default", "other"])
    RollupCount.objects.filter(queue=TOTAL).delete()
    add_totals()  # what migration 0012 runs on a rollup counted before totals existed
    assert by_slot(queue=TOTAL, task=TOTAL) == made


def test_task_stats_count_failure_rate_and_run_percentiles_per_task(
    engine: EngineSettings, token: str
) -> None:
    base = minutes_ago(20)
    events: list[Event] = []
    hashes: dict[str, dict[str, str]] = {}
    for i in range(8):  # app.e: 6 complete after 200 ms, 2 fail; app.f (queue other): 1 completes
        end = "failed" if i < 2 else "completed"
        events += life(f"e{i}", base + i, wait_ms=10, run_ms=200, end=end)
        hashes[f"e{i}"] = hash_of(f"e{i}", "app.e")
    events += life("f1", base, wait_ms=10, run_ms=3000, queue="other")
    hashes["f1"] = hash_of("f1", "app.f", queue="other")
    apply_batch(events, hashes)
    web = WebClient()
    got = web.get("/api/v1/task-stats?range=hour", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert [s["task"] for s in got] == ["app.e", "app.f"]  # the busiest first
    e, f = got
    assert (e["completed"], e["failed"], e["failure_rate"]) == (6, 2, 0.25)
    assert abs(e["run_p50_ms"] - 200) / 200 < 0.19 and abs(e["run_p95_ms"] - 200) / 200 < 0.19
    assert (f["completed"], f["failed"], f["failure_rate"]) == (1, 0, 0.0)
    assert abs(f["run_p95_ms"] - 3000) / 3000 < 0.19
    scoped = make_token(staff_user("scoped", VIEWERS), queues=["default"])
    mine = web.get("/api/v1/task-stats", HTTP_AUTHORIZATION=f"Bearer {scoped}").json()
    assert [s["task"] for s in mine] == ["app.e"]
    denied = web.get("/api/v1/task-stats?queue=other", HTTP_AUTHORIZATION=f"Bearer {scoped}")
    assert denied.status_code == 403
