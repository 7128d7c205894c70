"""Worker control through the API: the permission table, scope, audit, and a worker obeying."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import call_command
from django.test import Client as WebClient

from demo.wsgi import application as wsgi_app
from engine import EngineSettings, Worker
from jobsite.client import InvalidRequest, JobsiteClient, Unauthorized
from jobsite.jobs import services
from jobsite.jobs.history.reconcile import sync_workers
from jobsite.jobs.permissions import OPERATORS, VIEWERS
from tests.engine import tasks as t

from .conftest import make_token, staff_user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def live_worker(engine: EngineSettings) -> Iterator[Worker]:
    """A worker running in a thread of its own (no tasks: it claims nothing here)."""
    worker = Worker(dataclasses.replace(engine, heartbeat_interval_s=0.05), [], concurrency=3)
    thread = threading.Thread(target=asyncio.run, args=(worker.run(),), daemon=True)
    thread.start()
    try:
        wait_for(lambda: [w for w in workers(operator_token()) if w["id"] == worker.id])
        yield worker
    finally:
        if worker._loop is not None and not worker._loop.is_closed():
            worker._loop.call_soon_threadsafe(worker.stop)
        thread.join(10)


_tokens: dict[str, str] = {}


def operator_token() -> str:
    if "op" not in _tokens:
        _tokens["op"] = make_token(staff_user("op", OPERATORS))
    return _tokens["op"]


def workers(token: str) -> list[dict[str, Any]]:
    answer = WebClient().get("/api/v1/workers", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 200
    return list(answer.json())


def order(token: str | None, **body: Any) -> Any:
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return WebClient().post(
        "/api/v1/workers/control", body, content_type="application/json", **auth
    )


def wait_for(condition: Any, timeout_s: float = 5) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (got := condition()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return got


@pytest.fixture(autouse=True)
def _fresh_tokens() -> Iterator[None]:
    _tokens.clear()
    yield
    _tokens.clear()


def test_operator_quiets_resumes_and_stops_a_worker(live_worker: Worker) -> None:
    token = operator_token()
    answer = order(token, action="quiet", worker=live_worker.id)
    assert answer.status_code == 200 and answer.json()["workers"] == [live_worker.id]
    state = lambda: next(w["state"] for w in workers(token) if w["id"] == live_worker.id)  # noqa: E731
    wait_for(lambda: state() == "quiet", timeout_s=1.5)  # obeyed within a second
    assert order(token, action="resume", queue="default").json()["workers"] == [live_worker.id]
    wait_for(lambda: state() == "claiming", timeout_s=1.5)
    assert order(token, action="stop", host=socket.gethostname()).status_code == 200
    wait_for(lambda: not [w for w in workers(token) if w["id"] == live_worker.id])
    logged = LogEntry.objects.filter(object_id=live_worker.id).values_list(
        "change_message", flat=True
    )
    assert sorted(m.split(" via")[0] for m in logged) == [
        "worker quiet",
        "worker resume",
        "worker stop",
    ]


def test_control_needs_its_permission_and_scope(live_worker: Worker) -> None:
    viewer = make_token(staff_user("viewer", VIEWERS))
    assert order(None, action="quiet", worker=live_worker.id).status_code == 401
    assert order(viewer, action="quiet", worker=live_worker.id).status_code == 403
    operator = staff_user("scoped", OPERATORS)
    elsewhere = make_token(operator, queues=["other"])
    assert order(elsewhere, action="quiet", worker=live_worker.id).status_code == 403
    assert order(elsewhere, action="quiet", queue="default").status_code == 403
    limited = make_token(operator, permissions=["cancel_job"])
    assert order(limited, action="quiet", worker=live_worker.id).status_code == 403
    token = operator_token()
    assert order(token, action="quiet").status_code == 422  # no selector
    assert order(token, action="pause", worker=live_worker.id).status_code == 422
    assert order(token, action="quiet", worker="nobody:1:x").status_code == 404
    assert not LogEntry.objects.filter(object_id=live_worker.id).exists()
    assert next(w for w in workers(token) if w["id"] == live_worker.id)["state"] == "claiming"


def test_the_client_controls_workers(live_worker: Worker) -> None:
    transport = httpx.WSGITransport(app=wsgi_app)
    with JobsiteClient("http://testserver", operator_token(), transport=transport) as api:
        told = api.control_workers("quiet", worker=live_worker.id)
        assert told == {"action": "quiet", "workers": [live_worker.id]}
        wait_for(lambda: api.workers()[0]["state"] == "quiet", timeout_s=1.5)
        told = api.control_workers("resume", queue="default")
        assert told == {"action": "resume", "workers": [live_worker.id]}
        wait_for(lambda: api.workers()[0]["state"] == "claiming", timeout_s=1.5)
        with pytest.raises(InvalidRequest):
            api.control_workers("quiet")
    viewer = make_token(staff_user("viewer", VIEWERS))
    with (
        JobsiteClient("http://testserver", viewer, transport=transport) as api,
        pytest.raises(Unauthorized),
    ):
        api.control_workers("stop", worker=live_worker.id)


def test_admin_actions_control_workers(live_worker: Worker) -> None:
    sync_workers()
    token = operator_token()
    state = lambda: next(w["state"] for w in workers(token) if w["id"] == live_worker.id)  # noqa: E731
    changelist = "/admin/jobsite/workerrecord/"
    form = {"action": "quiet_workers", "_selected_action": [live_worker.id]}
    viewer = WebClient()
    viewer.force_login(staff_user("viewer", VIEWERS))
    assert viewer.post(changelist, form).status_code in (200, 302)
    time.sleep(0.3)
    assert state() == "claiming"  # the viewer has no such action
    web = WebClient()
    web.force_login(staff_user("operator", OPERATORS))
    assert web.post(changelist, form).status_code == 302
    wait_for(lambda: state() == "quiet", timeout_s=1.5)
    entry = LogEntry.objects.get(object_id=live_worker.id)
    assert entry.change_message == "worker quiet via admin"
    form["action"] = "resume_workers"
    assert web.post(changelist, form).status_code == 302
    wait_for(lambda: state() == "claiming", timeout_s=1.5)


def test_runworker_retires_after_max_jobs(engine: EngineSettings) -> None:
    """runworker --max-jobs: the worker retires after that many jobs and the command returns
    (exit 0 for its supervisor); the rest wait for the next worker."""
    ids = [services.enqueue(t.add, i, i).id for i in range(12)]
    call_command("runworker", "--only", "worker", "--max-jobs", "5", "--concurrency", "2")
    states = [services.run_engine(lambda c, i=i: c.jobs.get(i)).state.value for i in ids]
    assert states.count("completed") == 5 and states.count("submitted") == 7
