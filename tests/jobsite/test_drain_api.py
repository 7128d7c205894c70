"""Draining a queue from the API (in the background, with progress) and from manage.py."""

from __future__ import annotations

import time
from io import StringIO
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.test import Client as WebClient

from engine import EngineSettings, JobState
from jobsite.jobs import services
from jobsite.jobs.permissions import VIEWERS
from tests.engine import tasks as t

from .conftest import make_token, staff_user

pytestmark = pytest.mark.django_db(transaction=True)
WAITING = 3_000


def call(method: str, path: str, token: str) -> Any:
    return getattr(WebClient(), method)(
        f"/api/v1{path}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def enqueue(n: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, n, 1000):
        jobs = [t.add.call(i, i) for i in range(start, min(n, start + 1000))]
        ids += [j.id for j in services.run_engine(lambda c, jobs=jobs: c.enqueue_many(jobs))]
    return ids


def states(ids: list[str]) -> set[JobState]:
    return {services.run_engine(lambda c, i=i: c.jobs.get(i)).state for i in ids}


def test_drain_from_the_api_with_progress(engine: EngineSettings, token: str) -> None:
    old = enqueue(WAITING)
    answer = call("post", "/queues/default/drain", token)
    assert answer.status_code == 202, answer.json()
    assert answer.json()["waiting"] == WAITING and answer.json()["state"] == "running"
    new = [services.enqueue(t.add, 0, 0).id]  # during the drain (or just after it began)
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while (status := call("get", "/queues/default/drain", token).json())["state"] == "running":
        seen.append(status["cancelled"])
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert status["state"] == "done" and status["cancelled"] == WAITING
    assert seen == sorted(seen)
    assert states(old) == {JobState.CANCELLED} and states(new) == {JobState.SUBMITTED}
    entry = LogEntry.objects.get(object_id="default")
    assert entry.change_message == f"drain via API token 'robot-token': {WAITING} jobs waiting"


def test_drain_needs_cancel_and_one_at_a_time(engine: EngineSettings, token: str) -> None:
    # A configured queue is known before its first job: no drain yet; an unknown one is 404.
    assert call("get", "/queues/default/drain", token).json()["state"] == "none"
    assert call("get", "/queues/nowhere/drain", token).status_code == 404
    enqueue(10)
    viewer = make_token(staff_user("viewer", VIEWERS))
    assert call("post", "/queues/default/drain", viewer).status_code == 403
    assert call("get", "/queues/default/drain", viewer).json()["state"] == "none"
    answer = call("post", "/queues/default/drain", token)
    assert answer.status_code == 202
    again = call("post", "/queues/default/drain", token)
    # Either the first is still running (409) or it already finished and a new one starts.
    assert again.status_code in (202, 409)


def test_drain_from_manage_py(engine: EngineSettings) -> None:
    ids = enqueue(1500)
    out = StringIO()
    call_command("jobsite", "drain", "default", stdout=out)
    assert out.getvalue().strip() == "drained queue=default cancelled=1500"
    assert states(ids) == {JobState.CANCELLED}
