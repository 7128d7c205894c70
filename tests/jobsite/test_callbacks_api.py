"""Callbacks through the API (POST /jobs, POST /flows), the Python client's body and the
django-side enqueue, run by a real worker on a real Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.test import Client as WebClient

from engine import EngineSettings
from jobsite.client import callback, flow_job
from jobsite.jobs import services
from jobsite.jobs.permissions import OPERATORS
from jobsite.jobs.tasks.registry import known_tasks

from .conftest import make_token, mirror_all, run_worker, staff_user
from .test_api import call
from .test_flows_api import engine_job, submit

pytestmark = pytest.mark.django_db(transaction=True)


def _both(**extra: Any) -> dict[str, Any]:
    return {
        "on_success": {"task": "after", "kwargs": {"note": "ok"}},
        "on_failure": {"task": "after", "kwargs": {"note": "failed"}},
        **extra,
    }


def test_post_jobs_runs_the_success_callback_with_the_result(
    engine: EngineSettings, token: str
) -> None:
    made = submit(WebClient(), token, task="add", args=[2, 3], **_both())
    assert made.status_code == 201, made.content
    job = made.json()
    assert [(c["task"], c["runs_on"]) for c in job["callbacks"]] == [
        ("after", "success"),
        ("after", "failure"),
    ]
    ok, failure = (c["id"] for c in job["callbacks"])
    assert engine_job(engine, ok).state == "blocked"
    async_to_sync(run_worker)(engine)
    ran = engine_job(engine, ok)
    assert ran.state == "completed"
    assert ran.result == {
        "note": "ok",
        "parent_id": job["id"],
        "results": {job["id"]: 5},
        "errors": {job["id"]: None},
    }
    assert engine_job(engine, failure).state == "cancelled"


def test_post_jobs_runs_the_failure_callback_with_the_error(
    engine: EngineSettings, token: str
) -> None:
    job = submit(WebClient(), token, task="boom", **_both()).json()
    ok, failure = (c["id"] for c in job["callbacks"])
    async_to_sync(run_worker)(engine)
    assert engine_job(engine, ok).state == "cancelled"
    ran = engine_job(engine, failure)
    assert ran.state == "completed"
    error = ran.result["errors"][job["id"]]
    assert error["type"] == "ValueError" and "unexpected" in error["message"]


def test_a_callback_is_checked_as_an_enqueue_and_nothing_is_written_when_refused(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    cases = [
        ({"on_failure": {"task": "no.such"}}, 422, "on_failure: unknown task 'no.such'"),
        ({"on_success": {"task": "after", "kwargs": {"nope": 1}}}, 422, "nope"),
        ({"on_success": {"task": "after", "kwargs": {"parent_id": "x"}}}, 422, "parent_id"),
        ({"on_success": {"task": "add"}}, 422, "parent_id"),  # add takes no parent_id
    ]
    with redis.Redis.from_url(engine.redis_url) as r:
        for extra, status, message in cases:
            answer = submit(web, token, task="add", args=[1, 1], **extra)
            assert answer.status_code == status, (extra, answer.content)
            assert message in str(answer.json()["detail"])
        assert r.keys("*") == []


def test_submit_permission_on_the_queue_is_asked_of_the_callback_too(
    engine: EngineSettings,
) -> None:
    scoped = make_token(staff_user("scoped", OPERATORS), queues=["elsewhere"])
    web = WebClient()
    # A callback runs in its job's queue: a caller who may not submit there is refused, even
    # when the callback's own task is declared on a queue of theirs.
    refused = submit(web, scoped, task="add", args=[1, 1], on_success={"task": "after_elsewhere"})
    assert refused.status_code == 403 and "queue 'default'" in refused.json()["detail"]
    viewer = make_token(staff_user("viewer", OPERATORS), permissions=["view"])
    answer = submit(web, viewer, task="add", args=[1, 1], on_failure={"task": "after"})
    assert answer.status_code == 403
    with redis.Redis.from_url(engine.redis_url) as r:
        assert r.keys("*") == []


def test_a_callback_of_a_task_declared_elsewhere_runs_in_its_jobs_queue(
    engine: EngineSettings, token: str
) -> None:
    job = submit(WebClient(), token, task="add", args=[1, 1], on_success="x")
    assert job.status_code == 422  # a callback is {"task", "kwargs"}
    job = submit(
        WebClient(), token, task="add", args=[1, 1], on_success={"task": "after_elsewhere"}
    )
    (made,) = job.json()["callbacks"]
    assert engine_job(engine, made["id"]).queue == "default"


def test_a_flow_with_an_error_callback_node(engine: EngineSettings, token: str) -> None:
    body = {
        "name": "with an error callback",
        "jobs": [
            flow_job("work", "boom"),
            flow_job("cleanup", "after", depends_on=["work"], runs_on="failure", parent_id="-"),
            flow_job("report", "after", depends_on=["work"], runs_on="end", parent_id="-"),
            flow_job(
                "next", "step", "next", depends_on=["work"], options={"on_parent_failure": "cancel"}
            ),
        ],
    }
    web = WebClient()
    made = call(web, "post", "/flows", token, data=body)
    assert made.status_code == 201, made.content
    out = made.json()
    ids = {j["ref"]: j["id"] for j in out["jobs"]}
    async_to_sync(mirror_all)()
    graph = call(web, "get", f"/flows/{out['flow_id']}", token).json()["graph"]
    runs_on = {node["id"]: node["runs_on"] for node in graph}
    assert runs_on[ids["cleanup"]] == "failure" and runs_on[ids["report"]] == "end"
    assert runs_on[ids["next"]] is None
    async_to_sync(run_worker)(engine)
    states = {ref: engine_job(engine, job_id).state for ref, job_id in ids.items()}
    assert states == {
        "work": "failed",
        "cleanup": "completed",
        "report": "completed",
        "next": "cancelled",
    }
    cleanup = engine_job(engine, ids["cleanup"]).result
    assert cleanup["errors"][ids["work"]]["type"] == "ValueError"


def test_the_flow_runs_on_field_needs_parents(engine: EngineSettings, token: str) -> None:
    answer = submit(WebClient(), token, task="add", args=[1, 1], runs_on="failure")
    assert answer.status_code == 422 and "runs_on needs depends_on" in answer.json()["detail"]


def test_the_client_builds_the_callback_body() -> None:
    assert callback("after", note="x") == {"task": "after", "kwargs": {"note": "x"}}
    job = flow_job("c", "after", depends_on=["p"], runs_on="end")
    assert job["runs_on"] == "end" and job["depends_on"] == ["p"]


def test_services_enqueue_submits_the_callbacks_with_the_job(engine: EngineSettings) -> None:
    tasks = known_tasks()
    job = services.enqueue(tasks["add"].using(on_failure=tasks["after"]), 1, 2)
    (failure,) = job.callbacks
    assert engine_job(engine, failure.id).state == "blocked"
    async_to_sync(run_worker)(engine)
    assert engine_job(engine, job.id).result == 3
    assert engine_job(engine, failure.id).state == "cancelled"
