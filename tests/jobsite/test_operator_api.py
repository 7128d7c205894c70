"""The operator's API: scheduled and retrying jobs with "run now", clearing a
queue's finished jobs by state, Redis memory and uptime in /health, and no retry of a job that
cannot run (dropped as an unknown task)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.admin.models import LogEntry
from django.test import Client as WebClient

from engine import Client, EngineSettings, JobState
from engine.seam.scripts import BeginJob
from jobsite.jobs import services
from jobsite.jobs.models import JobRecord
from tests.engine import tasks as t

from .conftest import mirror_all, run_worker
from .test_api import call

pytestmark = pytest.mark.django_db(transaction=True)


def _retrying(engine: EngineSettings) -> str:
    """Return the id of a job waiting for its retry's backoff: claimed, begun and retried in 10
    minutes by the scripts a worker calls (a burst worker would wait for it)."""
    job = services.enqueue(t.add, 1, 2)

    async def fail_once(client: Client) -> None:
        k = client.keys("default")
        (row,) = await client.scripts.claim(
            k, events_maxlen=1000, max_jobs=1, lease_ms=30_000, worker_id="w", result_ttl_ms=60_000
        )
        await client.scripts.begin(k, lease_ms=30_000, jobs=[BeginJob(row.id, row.token, False)])
        await client.scripts.retry(
            k,
            events_maxlen=1000,
            worker_id="w",
            job_id=row.id,
            token=row.token,
            delay_ms=600_000,
            error_json=b'{"type":"Flaky","message":"try again"}',
            short_error="Flaky",
            ttl_ms=60_000,
        )

    services.run_engine(fail_once)
    assert services.run_engine(lambda c: c.jobs.get(job.id)).state is JobState.SCHEDULED
    return job.id


def test_scheduled_lists_delayed_and_retrying_apart_and_run_now_moves_them(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    retrying = _retrying(engine)
    later = [services.enqueue(t.add.using(delay_s=600 + i), i, i).id for i in range(3)]
    ready = services.enqueue(t.add, 1, 1).id

    def listed(**params: Any) -> list[str]:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        response = call(web, "get", f"/scheduled?{query}", token)
        assert response.status_code == 200, response.content
        return [j["id"] for j in response.json()]

    assert listed(retrying="true") == [retrying]
    assert listed(retrying="false") == later  # next due first
    every = listed(queue="default")
    assert sorted(every) == sorted([retrying, *later]), every
    assert listed(queue="default", limit=2, offset=1) == every[1:3]
    (only,) = call(web, "get", "/scheduled?retrying=true", token).json()
    assert only["attempt"] == 1 and only["run_at"] and only["error"]

    one = call(web, "post", f"/jobs/{later[0]}/run-now", token)
    assert one.status_code == 200 and one.json()["state"] == "submitted"
    again = call(web, "post", f"/jobs/{later[0]}/run-now", token)
    assert again.status_code == 409 and "not scheduled" in again.json()["detail"]
    assert call(web, "post", "/jobs/no-such/run-now", token).status_code == 404

    body = {"queue": "default", "ids": [later[1], retrying, ready, "ghost"]}
    bulk = call(web, "post", "/bulk/run-now", token, data=body).json()
    assert bulk["matched"] == 4 and bulk["changed"] == 2
    assert sum(bulk["skipped"].values()) == 2 and any("not scheduled" in k for k in bulk["skipped"])
    for job_id in (later[1], retrying):
        assert (
            services.run_engine(lambda c, job_id=job_id: c.jobs.get(job_id)).state
            is JobState.SUBMITTED
        )
    assert services.run_engine(lambda c: c.jobs.get(later[2])).state is JobState.SCHEDULED
    assert LogEntry.objects.filter(change_message__startswith="run now").count() == 3
    refused = call(web, "post", "/bulk/run-now", token, data={"queue": "default", "ids": []})
    assert refused.status_code == 422


def test_clear_by_state_deletes_from_redis_and_keeps_the_history(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    done = [services.enqueue(t.add, i, i).id for i in range(3)]
    async_to_sync(run_worker)(engine)
    waiting = services.enqueue(t.add, 9, 9).id
    async_to_sync(mirror_all)()
    path = "/queues/default/clear"

    counted = call(web, "post", path, token, data={"state": "completed", "dry_run": True}).json()
    assert counted["count"] == 3 and counted["dry_run"] and counted["history_kept"]
    cleared = call(web, "post", path, token, data={"state": "completed"}).json()
    assert cleared["count"] == 3 and not cleared["dry_run"]
    assert services.run_engine(lambda c: c.jobs.missing([(i, "default") for i in done])) == set(
        done
    )
    assert JobRecord.objects.filter(id__in=done, state="completed").count() == 3  # kept
    assert services.run_engine(lambda c: c.jobs.get(waiting)).state is JobState.SUBMITTED
    assert LogEntry.objects.filter(change_message__contains="clear via").count() == 1

    for state in ("submitted", "started", "scheduled", "nope"):
        refused = call(web, "post", path, token, data={"state": state})
        assert refused.status_code == 422 and "only finished jobs" in refused.json()["detail"]
    assert services.run_engine(lambda c: c.jobs.get(waiting)).state is JobState.SUBMITTED
    bad_queue = call(web, "post", "/queues/a b/clear", token, data={"state": "completed"})
    assert bad_queue.status_code in (404, 422)


def test_health_tells_redis_memory_and_uptime(engine: EngineSettings, token: str) -> None:
    redis = call(WebClient(), "get", "/health", token).json()["redis"]
    assert redis["used_memory_bytes"] > 0 and redis["used_memory_human"]
    assert redis["max_memory_human"] == "no limit" and redis["uptime_s"] >= 0


def _unknown_task_job(engine: EngineSettings) -> str:
    """Return the id of a job dropped as an unknown task (its task no worker has)."""
    job = t.add.call(1, 2)
    job.task = "gone.task"
    services.push([job])
    async_to_sync(run_worker)(engine)  # sets it aside: no worker serves gone.task

    async def clean(client: Client) -> int:  # the cleaner's drop, without waiting for it
        return await client.scripts.unserved(
            client.keys("default"), events_maxlen=1000, ttl_ms=60_000, drop_after_ms=0, max_jobs=9
        )

    assert services.run_engine(clean) == 1
    dropped = services.run_engine(lambda c: c.jobs.get(job.id))
    assert dropped.state is JobState.DROPPED and dropped.errors[-1]["type"] == "UnknownTask"
    return job.id


def test_a_job_of_an_unknown_task_is_not_retried(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    gone = _unknown_task_job(engine)
    failed = services.enqueue(t.boom).id
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()

    refused = call(web, "post", f"/jobs/{gone}/retry", token)
    assert refused.status_code == 409 and "unknown task" in refused.json()["detail"]
    assert services.run_engine(lambda c: c.jobs.get(gone)).state is JobState.DROPPED

    bulk = call(web, "post", "/bulk/retry", token, data={"ids": [gone, failed]}).json()
    assert bulk["changed"] == 1 and any("unknown task" in k for k in bulk["skipped"])
    assert services.run_engine(lambda c: c.jobs.get(gone)).state is JobState.DROPPED

    by_ids = call(web, "post", "/dlq/resubmit", token, data={"queue": "default", "ids": [gone]})
    assert by_ids.json()["count"] == 0
    by_task = call(web, "post", "/dlq/resubmit", token, data={"task": "gone.task"})
    assert by_task.status_code == 409

    groups = call(web, "get", "/dead-letters", token).json()
    (group,) = [g for g in groups if "gone.task" in g["tasks"]]
    assert "unknown task" in group["cannot_run"]
    fp = {"fingerprint": group["fingerprint"], "dry_run": True}
    counted = call(web, "post", "/dead-letters/resubmit", token, data=fp).json()
    assert any("unknown task" in k for k in counted["skipped"])
    assert services.run_engine(lambda c: c.jobs.get(gone)).state is JobState.DROPPED


def test_a_job_that_cannot_run_says_why(engine: EngineSettings, token: str) -> None:
    """The job's JSON tells the page why it has no Retry (and no replay): its task is unknown."""
    web = WebClient()
    gone = _unknown_task_job(engine)
    failed = services.enqueue(t.boom).id
    async_to_sync(run_worker)(engine)
    live = call(web, "get", f"/jobs/{gone}", token).json()
    assert "'gone.task'" in live["cannot_run"] and "unknown task" in live["cannot_run"]
    assert call(web, "get", f"/jobs/{failed}", token).json()["cannot_run"] == ""
    async_to_sync(mirror_all)()
    listed = {j["id"]: j for j in call(web, "get", "/jobs", token).json()["items"]}
    assert "unknown task" in listed[gone]["cannot_run"] and listed[failed]["cannot_run"] == ""
    services.purge([(gone, "default")])  # gone from Redis: the history row says the same
    assert "unknown task" in call(web, "get", f"/jobs/{gone}", token).json()["cannot_run"]
    assert b'id="cannot-run"' in _staff_page(f"/dashboard/jobs/{gone}/")


def _staff_page(url: str) -> bytes:
    from jobsite.jobs.permissions import OPERATORS

    from .conftest import staff_user

    web = WebClient()
    web.force_login(staff_user("op", OPERATORS))
    page = web.get(url)
    assert page.status_code == 200
    return page.content


def test_resubmit_of_a_whole_queue_skips_jobs_that_cannot_run(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    gone = _unknown_task_job(engine)
    failed = services.enqueue(t.boom).id
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    assert services.run_engine(lambda c: c.dead_letters.contains("default", [gone, failed])) == {
        gone,
        failed,
    }
    reason = "dropped as an unknown task; no worker has it (register the task first)"

    whole = {"queue": "default", "dry_run": True}
    counted = call(web, "post", "/dead-letters/resubmit", token, data=whole).json()
    assert counted == {"matched": 2, "changed": 0, "skipped": {reason: 1}}
    done = call(web, "post", "/dead-letters/resubmit", token, data={"queue": "default"}).json()
    assert (done["matched"], done["changed"], done["skipped"]) == (2, 1, {reason: 1})
    assert services.run_engine(lambda c: c.jobs.get(gone)).state is JobState.DROPPED
    assert services.run_engine(lambda c: c.jobs.get(failed)).state is JobState.SUBMITTED
    assert services.run_engine(lambda c: c.dead_letters.contains("default", [gone, failed])) == {
        gone
    }

    # The old alias: the same skip, said beside its count.
    alias = call(web, "post", "/dlq/resubmit", token, data={"queue": "default"}).json()
    assert alias == {"count": 0, "skipped": {reason: 1}}
    by_ids = call(web, "post", "/dlq/resubmit", token, data={"queue": "default", "ids": [gone]})
    assert by_ids.json() == {"count": 0, "skipped": {reason: 1}}
    assert services.run_engine(lambda c: c.jobs.get(gone)).state is JobState.DROPPED


def test_the_engine_client_is_what_the_services_use(engine: EngineSettings) -> None:
    async def go(client: Client) -> dict[str, str]:
        return await client.jobs.run_now("default", ["nothing"])

    assert services.run_engine(go) == {"nothing": "not_found"}
