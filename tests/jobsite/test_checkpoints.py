"""Checkpoints through the Django side: a django.tasks function saves its place through its
context, and the JSON API, the Python client and the job page show what a job saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from asgiref.sync import async_to_sync
from django.test import Client as WebClient

from demo.asgi import application as asgi_app
from demo.wsgi import application as wsgi_app
from engine import EngineSettings, JobState
from jobsite.client import AsyncJobsiteClient, JobsiteClient
from jobsite.jobs import services
from jobsite.jobs.permissions import OPERATORS

from . import dj_tasks
from .conftest import mirror_all, run_worker, staff_user

pytestmark = pytest.mark.django_db(transaction=True)

BASE = "/api/v1"


def rows_done(path: Path) -> list[tuple[int, int]]:
    """Return the (attempt, row) pairs a task wrote to its ledger, in order."""
    return [(x["attempt"], x["row"]) for x in map(orjson.loads, path.read_bytes().splitlines())]


def api_get(path: str, token: str) -> Any:
    return WebClient().get(BASE + path, HTTP_AUTHORIZATION=f"Bearer {token}")


def test_a_django_task_with_context_resumes_from_its_checkpoint_sync_and_async(
    engine: EngineSettings, tmp_path: Path
) -> None:
    sync_ledger, async_ledger = tmp_path / "sync.jsonl", tmp_path / "async.jsonl"
    sync = dj_tasks.resume_rows.enqueue(5, 2, str(sync_ledger))
    aio = dj_tasks.aresume_rows.enqueue(5, 2, str(async_ledger))
    async_to_sync(run_worker)(engine)
    want = [(1, 0), (1, 1), (2, 2), (2, 3), (2, 4)]  # each row once: attempt 2 resumed at 2
    for result, ledger in ((sync, sync_ledger), (aio, async_ledger)):
        assert result.task.get_result(result.id).return_value == 5
        assert rows_done(ledger) == want
        job = services.run_engine(lambda c, result=result: c.jobs.get(result.id))
        assert job.state is JobState.COMPLETED and job.checkpoint is None  # cleared


def test_the_api_and_the_client_return_what_a_job_saved(engine: EngineSettings, token: str) -> None:
    failed = dj_tasks.saves_then_fails.enqueue({"next": 7})
    done = dj_tasks.resume_rows.enqueue(1, -1, "/dev/null")
    async_to_sync(run_worker)(engine)
    live = api_get(f"/jobs/{failed.id}", token).json()  # from Redis
    assert live["state"] == "failed" and live["checkpoint"] == {"next": 7}
    assert api_get(f"/jobs/{done.id}", token).json()["checkpoint"] is None  # completed: cleared
    wsgi = httpx.WSGITransport(app=wsgi_app)
    with JobsiteClient("http://testserver", token, transport=wsgi) as api:
        assert api.checkpoint(failed.id) == {"next": 7}
        assert api.get(failed.id)["checkpoint"] == {"next": 7}
        assert api.checkpoint(done.id) is None

    async def from_async() -> Any:
        transport = httpx.ASGITransport(app=asgi_app)
        async with AsyncJobsiteClient("http://testserver", token, transport=transport) as api:
            return await api.checkpoint(failed.id)

    assert async_to_sync(from_async)() == {"next": 7}
    # Once Redis forgot the job, the history has no checkpoint to give.
    async_to_sync(mirror_all)()
    listed = api_get("/jobs", token).json()["items"]
    assert listed and all("checkpoint" not in item for item in listed)  # detail only
    assert services.purge([(failed.id, "default")]) == 1
    kept = api_get(f"/jobs/{failed.id}", token).json()
    assert kept["state"] == "failed" and kept["checkpoint"] is None


def test_the_job_page_has_a_card_for_the_saved_state(engine: EngineSettings) -> None:
    web = WebClient()
    web.force_login(staff_user("viewer-of-checkpoints", OPERATORS))
    page = web.get("/dashboard/jobs/some-job/")
    assert page.status_code == 200
    assert b'<section id="checkpoint" hidden><h2>Saved state</h2>' in page.content
