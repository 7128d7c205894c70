"""The admin's worker roles page: listed from Redis, saved and deleted by operators (audited),
read-only for viewers, bad input refused with nothing changed; the workers' list shows each
worker's role."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client as WebClient
from django.test import override_settings

from engine import EngineSettings, Worker
from jobsite.jobs import services
from jobsite.jobs.history.reconcile import sync_workers
from jobsite.jobs.permissions import OPERATORS, VIEWERS
from jobsite.jobs.services.roles import role, save_role

from .conftest import staff_user

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/admin/jobsite/workerrecord/roles/"
SERVED = ["default", "spare", "other", "extract", "load", "x"]


@pytest.fixture(autouse=True)
def served(engine: EngineSettings) -> Iterator[None]:
    """Serve the queues these roles name: a role names only queues of JOBSITE["QUEUES"]."""
    from django.conf import settings

    with override_settings(JOBSITE={**settings.JOBSITE, "QUEUES": SERVED}):
        yield


def logged_in(name: str, group: str) -> WebClient:
    web = WebClient()
    web.force_login(staff_user(name, group))
    return web


def test_operator_saves_and_deletes_a_role(engine: EngineSettings) -> None:
    web = logged_in("op", OPERATORS)
    assert b"Roles" in web.get("/admin/jobsite/workerrecord/").content  # the link to the page
    response = web.post(URL, {"save": "1", "name": "etl", "queues": "extract, load"})
    assert response.status_code == 302
    found = role("etl")
    assert found is not None and found.role.queues == ("extract", "load")
    page = web.get(URL).content.decode()
    assert "etl" in page and "<code>load</code>" in page
    bad = web.post(URL, {"save": "1", "name": "etl", "queues": "a, a"})
    assert bad.status_code == 200 and "each queue once" in bad.content.decode()
    bad_name = web.post(URL, {"save": "1", "name": "no such", "queues": "a"})
    assert bad_name.status_code == 200 and "role names" in bad_name.content.decode()
    assert role("etl").role.queues == ("extract", "load")  # type: ignore[union-attr]
    assert web.post(URL, {"delete": "etl"}).status_code == 302
    assert role("etl") is None
    logged = set(LogEntry.objects.values_list("object_id", "change_message"))
    assert ("role/etl", "save via admin: queues extract,load") in logged
    assert ("role/etl", "delete via admin") in logged


def test_viewer_reads_but_cannot_change(engine: EngineSettings) -> None:
    save_role("etl", ["load"])
    web = logged_in("viewer", VIEWERS)
    page = web.get(URL)
    assert page.status_code == 200 and "<code>load</code>" in page.content.decode()
    assert 'name="delete"' not in page.content.decode()
    assert web.post(URL, {"save": "1", "name": "etl", "queues": "x"}).status_code == 403
    assert web.post(URL, {"delete": "etl"}).status_code == 403
    assert role("etl").role.queues == ("load",)  # type: ignore[union-attr]
    assert WebClient().get(URL).status_code == 302  # anonymous: to the login page


def test_the_workers_list_shows_each_workers_role(engine: EngineSettings) -> None:
    save_role("etl", ["default", "spare"])
    fast = dataclasses.replace(engine, heartbeat_interval_s=0.05)
    with_role, plain = Worker(fast, [], role="etl"), Worker(fast, [], queues=["other"])
    threads = [threading.Thread(target=asyncio.run, args=(w.run(),)) for w in (with_role, plain)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 10
        while len(services.run_engine(lambda c: c.workers.list())) < 2:
            assert time.monotonic() < deadline, "the workers never registered"
            time.sleep(0.05)
        sync_workers()
        page = logged_in("viewer", VIEWERS).get("/admin/jobsite/workerrecord/").content.decode()
    finally:
        for worker in (with_role, plain):
            if worker._loop is not None and not worker._loop.is_closed():
                worker._loop.call_soon_threadsafe(worker.stop)
        for thread in threads:
            thread.join(10)
    assert 'class="sortable column-role"' in page
    rows = page.split("<tr")
    (mine,) = [row for row in rows if with_role.id in row and "field-role" in row]
    assert '<td class="field-role">etl</td>' in mine
    (other,) = [row for row in rows if plain.id in row and "field-role" in row]
    assert '<td class="field-role">-</td>' in other  # queues given at start: no role


def test_a_role_naming_queues_no_worker_serves_is_saved_and_said(engine: EngineSettings) -> None:
    """Accepted (a role may be made before its workers start), but the admin warns which
    queues no live worker serves; a worker serving one, or following the role, serves it."""
    fast = dataclasses.replace(engine, heartbeat_interval_s=0.05)
    plain = Worker(fast, [], queues=["other"])
    thread = threading.Thread(target=asyncio.run, args=(plain.run(),))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not services.run_engine(lambda c: c.workers.list()):
            assert time.monotonic() < deadline, "the worker never registered"
            time.sleep(0.05)
        web = logged_in("op", OPERATORS)
        saved = web.post(URL, {"save": "1", "name": "etl", "queues": "other, x, load"}, follow=True)
        assert role("etl") is not None  # saved all the same
        page = saved.content.decode()
        assert "Saved role etl: other, x, load" in page
        assert "Role etl: no worker serves: x, load" in page
        assert save_role("served", ["other"]).warning() is None  # the plain worker serves it
    finally:
        if plain._loop is not None and not plain._loop.is_closed():
            plain._loop.call_soon_threadsafe(plain.stop)
        thread.join(10)
