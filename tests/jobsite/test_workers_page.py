"""The Workers page and what it reads: GET /workers with each worker's memory, outcomes and task
versions (narrowed to a token's queues), the admin's worker rows without a delete, and a
resubmit that says where to follow its jobs (the `ids` filter of /jobs and /job-counts)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from asgiref.sync import async_to_sync
from django.test import Client as WebClient

from engine import EngineSettings, Worker
from engine.keys import worker_key
from jobsite.jobs import services
from jobsite.jobs.api.jobs import IDS_MAX
from jobsite.jobs.models import JobRecord
from jobsite.jobs.permissions import OPERATORS, VIEWERS
from jobsite.jobs.tasks.registry import load_tasks
from tests.engine import tasks as t

from .conftest import MODULES, make_token, mirror_all, run_worker, staff_user
from .test_job_identity import QUEUES, api, two_queues  # noqa: F401  (two_queues: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for[T](condition: Callable[[], T], timeout_s: float = 10) -> T:
    deadline = time.monotonic() + timeout_s
    while not (got := condition()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
    return got


@pytest.fixture
def worker(two_queues: EngineSettings) -> Iterator[Worker]:  # noqa: F811
    """A worker of default and billing, with every test task, in a thread of its own."""
    settings = dataclasses.replace(two_queues, heartbeat_interval_s=0.05)
    running = Worker(settings, load_tasks(MODULES), queues=QUEUES, concurrency=4)
    thread = threading.Thread(target=asyncio.run, args=(running.run(),), daemon=True)
    thread.start()
    try:
        yield running
    finally:
        if running._loop is not None and not running._loop.is_closed():
            running._loop.call_soon_threadsafe(running.stop)
        thread.join(10)


def test_workers_show_memory_outcomes_and_versions_narrowed_to_a_token(worker: Worker) -> None:
    keys = {
        "all": make_token(staff_user("all-view", VIEWERS)),
        "billing": make_token(staff_user("b-view", VIEWERS), queues=["billing"]),
        "elsewhere": make_token(staff_user("o-view", VIEWERS), queues=["other"]),
    }
    for n in range(3):
        services.enqueue(t.add, n, n)
    services.enqueue(t.boom)  # no retries: one failed attempt
    services.enqueue(t.add.using(queue="billing"), 1, 1)

    def seen(key: str) -> list[dict[str, Any]]:
        answer = api("get", "/workers", keys[key])
        assert answer.status_code == 200, answer.content
        return list(answer.json())

    (mine,) = wait_for(lambda: [w for w in seen("all") if w["completed"] == 4 and w["failed"]])
    assert mine["id"] == worker.id and mine["failed"] == 1
    assert 5 < mine["rss_mib"] < 10_000  # resident MiB, as /proc says
    assert {"add@1", "boom@1", "versioned@2"} <= set(mine["versions"])
    assert mine["versions"] == sorted(mine["versions"])
    assert mine["queues"] == "default,billing" and mine["state"] == "claiming"
    # The overview's snapshot, sent to every dashboard, leaves the versions to this list.
    (listed,) = api("get", "/live", keys["all"]).json()["workers"]
    assert listed["rss_mib"] > 0 and "versions" not in listed

    # A token of billing sees the worker, its billing queue and only billing's outcomes.
    (narrowed,) = seen("billing")
    assert narrowed["queues"] == "billing"
    assert (narrowed["completed"], narrowed["failed"]) == (1, 0)
    assert narrowed["rss_mib"] == pytest.approx(mine["rss_mib"], rel=0.5)
    assert seen("elsewhere") == []

    # A lapsed registry entry (Redis lost it) is written whole again, task versions included.
    services.run_engine(lambda c: c.redis.delete(worker_key(c.settings.prefix, worker.id)))
    again = wait_for(lambda: [w for w in seen("all") if w["versions"]])
    assert again[0]["versions"] == mine["versions"]


def test_the_workers_page_is_in_the_nav_for_viewers(engine: EngineSettings) -> None:
    web = WebClient()
    web.force_login(staff_user("viewer", VIEWERS))
    page = web.get("/dashboard/workers/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/dashboard/workers/">Workers</a>' in html
    assert "jobsite/workers.js" in html and 'id="workers-table"' in html
    assert page.context["config"]["may"]["control_worker"] is False
    stranger = WebClient()
    stranger.force_login(staff_user("nobody"))
    assert stranger.get("/dashboard/workers/").status_code == 403


def test_the_admin_offers_no_delete_of_worker_rows(engine: EngineSettings) -> None:
    web = WebClient()
    web.force_login(staff_user("op", OPERATORS, is_superuser=True))
    page = web.get("/admin/jobsite/workerrecord/")
    assert page.status_code == 200
    actions = [name for name, _ in page.context["action_form"].fields["action"].choices]
    assert "delete_selected" not in actions
    assert {"quiet_workers", "resume_workers", "stop_workers"} <= set(actions)


def test_the_ids_filter_of_the_list_and_its_counts(engine: EngineSettings, token: str) -> None:
    ids = [services.enqueue(t.add, n, n).id for n in range(3)]
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    chosen = ",".join(ids[:2])
    listed = api("get", f"/jobs?ids={chosen}", token).json()["items"]
    assert sorted(j["id"] for j in listed) == sorted(ids[:2])
    counted = api("get", f"/job-counts?ids={chosen}", token).json()
    assert counted == {"total": 2, "states": {"completed": 2}}
    too_many = ",".join(f"j{n}" for n in range(IDS_MAX + 1))
    assert api("get", f"/job-counts?ids={too_many}", token).status_code == 422
    assert api("get", "/jobs?ids=a,,b", token).status_code == 422
    assert api("get", "/jobs?ids=a%2Fb", token).status_code == 422


def test_a_resubmit_says_where_to_follow_its_jobs(engine: EngineSettings, token: str) -> None:
    failed = [services.enqueue(t.boom).id for _ in range(3)]
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    fingerprint = JobRecord.objects.get(id=failed[0]).fingerprint
    dry = api(
        "post", "/dead-letters/resubmit", token, {"fingerprint": fingerprint, "dry_run": True}
    )
    assert dry.json() == {"matched": 3, "changed": 0, "skipped": {}}  # as before

    answer = api("post", "/dead-letters/resubmit", token, {"fingerprint": fingerprint}).json()
    assert (answer["matched"], answer["changed"]) == (3, 3)
    assert sorted(answer["ids"]) == sorted(failed)
    counts_url, jobs_url = urlsplit(answer["counts_url"]), urlsplit(answer["jobs_url"])
    assert counts_url.path == "/api/v1/job-counts" and jobs_url.path == "/dashboard/jobs/"
    query = parse_qs(counts_url.query)
    assert sorted(query["ids"][0].split(",")) == sorted(failed)
    since = datetime.fromisoformat(query["since"][0])
    assert since == datetime.fromisoformat(answer["since"]) and parse_qs(jobs_url.query) == query

    def follow() -> dict[str, Any]:
        got = WebClient().get(answer["counts_url"], HTTP_AUTHORIZATION=f"Bearer {token}")
        assert got.status_code == 200, got.content
        return dict(got.json())

    # The history's rows still tell the first failure: none counts before the mirror sees
    # them resubmitted (all still running, as the page says).
    assert follow() == {"total": 0, "states": {}}
    async_to_sync(mirror_all)()
    assert follow() == {"total": 3, "states": {"submitted": 3}}
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    assert follow() == {"total": 3, "states": {"failed": 3}}  # failed again

    # By ids: the same, naming the queue; a whole queue: followed by queue and time.
    by_ids = {"queue": "default", "ids": failed[:1]}
    one = api("post", "/dead-letters/resubmit", token, by_ids).json()
    assert one["ids"] == failed[:1] and "ids=" in one["counts_url"]
    whole = api("post", "/dead-letters/resubmit", token, {"queue": "default"}).json()
    assert whole["changed"] == 2 and whole["ids"] == []
    assert parse_qs(urlsplit(whole["counts_url"]).query)["queue"] == ["default"]
