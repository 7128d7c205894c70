"""A job waiting for a worker with its task version is shown as such in the API."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.test import Client as WebClient

from engine import EngineSettings, task_ref
from jobsite.jobs import services

from .conftest import run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_job_waiting_for_its_version_says_so(engine: EngineSettings, token: str) -> None:
    job = services.enqueue(task_ref("nobody.home", version=3))
    async_to_sync(run_worker)(engine)  # a worker without that version sets it aside
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    body = WebClient().get(f"/api/v1/jobs/{job.id}", **auth).json()
    assert body["state"] == "submitted"
    assert body["waiting_for_version"] == "nobody.home@3"
    assert body["waiting_for_version_since"] is not None
    queues = WebClient().get("/api/v1/queues", **auth).json()
    counts = next(q for q in queues if q["name"] == "default")["counts"]
    assert counts["waiting_version"] == 1 and counts["submitted"] == 1


def test_scaling_figures_in_the_api(engine: EngineSettings, token: str) -> None:
    for _ in range(4):
        services.enqueue(task_ref("nobody.home"))
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    (row,) = WebClient().get("/api/v1/scaling", **auth).json()
    assert row["queue"] == "default" and row["runnable"] == 4 and row["worker_slots"] == 0
    assert row["runnable_per_slot"] == 4 and row["oldest_runnable_s"] >= 0
    async_to_sync(run_worker)(engine)  # sets them aside: not runnable by this build
    (row,) = WebClient().get("/api/v1/scaling", **auth).json()
    assert row["runnable"] == 0 and row["waiting_for_version"] == {"nobody.home@1": 4}
    assert WebClient().get("/api/v1/scaling").status_code == 401
