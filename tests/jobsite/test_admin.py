"""Admin bulk actions: CSRF enforced, permissions, a confirmation page, counts, LogEntry."""

from __future__ import annotations

import time
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client as WebClient
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from engine import Client, EngineSettings, JobState
from jobsite.jobs import services
from jobsite.jobs.models import BulkRun, JobRecord
from jobsite.jobs.permissions import Perm
from jobsite.jobs.search import text_search
from jobsite.jobs.tasks import runnable
from tests.engine import tasks as t

from .conftest import mirror_all, run_worker

pytestmark = pytest.mark.django_db(transaction=True)
URL = "/admin/jobsite/jobrecord/"


def login(user: User) -> tuple[WebClient, str]:
    web = WebClient(enforce_csrf_checks=True)
    web.force_login(user)
    web.get(URL)
    return web, web.cookies["csrftoken"].value


def states(engine: EngineSettings, ids: list[str]) -> list[JobState]:
    async def get() -> list[JobState]:
        async with Client(engine) as client:
            return [(await client.jobs.get(i)).state for i in ids]

    return async_to_sync(get)()


@pytest.fixture
def admin_user() -> User:
    return User.objects.create_superuser("boss", "boss@example.com", "pw")


def queued_jobs(n: int) -> list[str]:
    ids = [services.enqueue(t.add.using(delay_s=60), i, i).id for i in range(n)]
    async_to_sync(mirror_all)()
    return ids


def test_changelist_filters_and_search(engine: EngineSettings, admin_user: User) -> None:
    ids = queued_jobs(3)
    web, _ = login(admin_user)
    page = web.get(URL, {"state__exact": "scheduled", "q": ids[0]})
    assert page.status_code == 200 and ids[0] in page.content.decode()
    assert ids[1] not in page.content.decode()
    detail = web.get(f"{URL}{ids[0]}/change/")
    assert detail.status_code == 200 and "unsubmitted" in detail.content.decode()  # timeline
    assert web.get(f"{URL}nope/change/").status_code in (302, 404)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"state__exact": "scheduled"},
        {"queue": "default"},
        {"task": "add"},
        {"submitted_at__gte": "2026-01-01 00:00:00+00:00"},
        {"q": "add"},
        {"state__exact": "failed", "queue": "default", "q": "job-1"},
    ],
)
def test_changelist_never_reads_the_whole_table(
    engine: EngineSettings, admin_user: User, params: dict[str, str]
) -> None:
    """No DISTINCT for filter choices or dates, and every COUNT over a LIMIT subquery."""
    queued_jobs(3)
    web, _ = login(admin_user)
    with CaptureQueriesContext(connection) as seen:
        page = web.get(URL, params)
    assert page.status_code == 200
    history = [
        q["sql"].upper() for q in seen.captured_queries if "JOBSITE_JOBRECORD" in q["sql"].upper()
    ]
    searched = [q for q in seen.captured_queries if "JOBSITE_JOBSEARCH" in q["sql"].upper()]
    assert len(searched) == ("q" in params), searched  # the count and the page share one search
    if "job-1" in params.get("q", ""):  # matches nothing: no history to read at all
        assert history == []
        return
    assert history, "the changelist read no history"
    assert not [sql for sql in history if "DISTINCT" in sql]
    counts = [sql for sql in history if "COUNT(" in sql]
    assert counts and all("LIMIT" in sql for sql in counts), counts
    if "task" in params:  # the choices came from the registry: the filter lists the task
        assert 'href="?task=add"' in page.content.decode()


def test_row_checkboxes_render_as_djangos_own(engine: EngineSettings) -> None:
    from django.contrib import admin

    queued_jobs(1)
    job_admin = admin.site._registry[JobRecord]
    row = JobRecord.objects.get()
    assert job_admin.action_checkbox(row) == admin.ModelAdmin.action_checkbox(job_admin, row)


def test_a_search_resolved_to_ids_falls_back_to_a_subquery_over_its_cap(
    engine: EngineSettings,
) -> None:
    ids = queued_jobs(3)
    rows = JobRecord.objects.all()
    by_ids = text_search(rows, "add", ids_up_to=3)
    assert "JOBSITE_JOBSEARCH" not in str(by_ids.query).upper()  # the ids were read at once
    over = text_search(rows, "add", ids_up_to=2)
    assert "JOBSITE_JOBSEARCH" in str(over.query).upper()  # more matches than the cap
    assert sorted(by_ids.values_list("id", flat=True)) == sorted(ids)
    assert sorted(over.values_list("id", flat=True)) == sorted(ids)


def test_cancel_needs_csrf_then_confirmation(engine: EngineSettings, admin_user: User) -> None:
    ids = queued_jobs(3)
    web, token = login(admin_user)
    form = {"action": "cancel_jobs", "_selected_action": ids[:2], "index": "0"}
    assert web.post(URL, form).status_code == 403  # no CSRF token
    confirm = web.post(URL, {**form, "csrfmiddlewaretoken": token})
    assert confirm.status_code == 200 and "cancel</strong> 2 jobs" in confirm.content.decode()
    assert states(engine, ids) == [JobState.SCHEDULED] * 3  # nothing happened yet
    done = web.post(URL, {**form, "post": "yes", "csrfmiddlewaretoken": token})
    assert done.status_code == 302
    assert states(engine, ids) == [JobState.CANCELLED, JobState.CANCELLED, JobState.SCHEDULED]
    entries = LogEntry.objects.filter(object_id__in=ids[:2])
    assert entries.count() == 2 and "cancel via admin" in entries[0].change_message


def test_action_on_everything_matching_the_filter(engine: EngineSettings, admin_user: User) -> None:
    ids = queued_jobs(5)
    web, token = login(admin_user)
    form = {
        "action": "cancel_jobs",
        "select_across": "1",
        "index": "0",
        "post": "yes",
        "csrfmiddlewaretoken": token,
        "_selected_action": ids[:1],
    }
    assert web.post(f"{URL}?state__exact=scheduled", form).status_code == 302
    assert set(states(engine, ids)) == {JobState.CANCELLED}


def test_retry_and_purge(engine: EngineSettings, admin_user: User) -> None:
    failed = services.enqueue(t.boom)
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    assert JobRecord.objects.get(id=failed.id).state == "failed"
    web, token = login(admin_user)
    form = {
        "_selected_action": [failed.id],
        "index": "0",
        "post": "yes",
        "csrfmiddlewaretoken": token,
    }
    assert web.post(URL, {**form, "action": "resubmit_dlq"}).status_code == 302
    assert states(engine, [failed.id]) == [JobState.SUBMITTED]
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    assert web.post(URL, {**form, "action": "purge_jobs"}).status_code == 302
    assert not JobRecord.objects.filter(id=failed.id).exists()
    purged = LogEntry.objects.get(object_id=failed.id, action_flag=DELETION)
    assert purged.change_message.startswith("purge via admin")


def test_staff_without_permission_cannot_act(engine: EngineSettings) -> None:
    ids = queued_jobs(1)
    clerk = User.objects.create_user("clerk", password="pw", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename=Perm.VIEW))
    web, token = login(clerk)
    assert web.get(URL).status_code == 200
    form = {
        "action": "cancel_jobs",
        "_selected_action": ids,
        "index": "0",
        "post": "yes",
        "csrfmiddlewaretoken": token,
    }
    web.post(URL, form)
    assert states(engine, ids) == [JobState.SCHEDULED]
    anonymous = WebClient()
    assert anonymous.get(URL).status_code == 302  # to the login page


def test_queue_pause_and_resume(engine: EngineSettings, admin_user: User) -> None:
    from jobsite.jobs.history.reconcile import sync_queues
    from jobsite.jobs.models import QueueRecord

    services.enqueue(t.add, 1, 1)
    assert sync_queues() == 1
    web, token = login(admin_user)
    form = {"_selected_action": ["default"], "index": "0", "csrfmiddlewaretoken": token}
    assert web.post("/admin/jobsite/queuerecord/", {**form, "action": "pause"}).status_code == 302

    async def paused() -> bool:
        async with Client(engine) as client:
            return await client.queues.is_paused("default")

    assert async_to_sync(paused)() and QueueRecord.objects.get(name="default").paused
    assert web.post("/admin/jobsite/queuerecord/", {**form, "action": "resume"}).status_code == 302
    assert not async_to_sync(paused)()
    assert LogEntry.objects.filter(object_id="default").count() == 2


def messages_of(page: Any) -> list[str]:
    """Return the admin messages a page shows, in order."""
    return [str(m) for m in page.context["messages"]]


def test_actions_say_what_happened_in_the_operators_words(
    engine: EngineSettings, admin_user: User
) -> None:
    """The confirmation page keeps the admin's breadcrumb and says what it leaves alone, why;
    the result says what happened to how many jobs, and why the others were not touched."""
    failed = services.enqueue(t.boom)
    async_to_sync(run_worker)(engine)
    ids = queued_jobs(3)
    JobRecord.objects.filter(id=ids[2]).update(state="started")  # as the history last saw it
    web, token = login(admin_user)
    form = {"index": "0", "csrfmiddlewaretoken": token}
    retry = {**form, "action": "retry_jobs", "_selected_action": [failed.id, ids[2]]}
    confirm = web.post(URL, retry).content.decode()
    assert "retry</strong> 1 job." in confirm and "1 job: it is still running" in confirm
    assert f'<a href="{URL}">Jobs</a>' in confirm  # Home > Jobsite > Jobs > Retry jobs
    assert 'href="/admin/jobsite/"' in confirm and "Retry jobs" in confirm
    assert "engine" not in confirm.split('id="content"')[1]
    done = web.post(URL, {**retry, "post": "yes"}, follow=True)
    assert messages_of(done) == [
        "1 job queued to run again",
        "1 job was not retried: it is still running",
    ]
    cancel = {**form, "action": "cancel_jobs", "_selected_action": [*ids, failed.id]}
    assert messages_of(web.post(URL, {**cancel, "post": "yes"}, follow=True)) == [
        "3 jobs cancelled",
        "1 job was not cancelled: it already ended (failed)",  # as the history last saw it
    ]


def test_select_all_past_the_cap_starts_the_apis_background_run(
    engine: EngineSettings, admin_user: User
) -> None:
    ids = queued_jobs(5)
    web, token = login(admin_user)
    form = {
        "action": "cancel_jobs",
        "select_across": "1",
        "index": "0",
        "csrfmiddlewaretoken": token,
        "_selected_action": ids[:1],
    }
    chosen = f"{URL}?state__exact=scheduled&q=add"
    with override_settings(JOBSITE={**settings.JOBSITE, "BULK_MAX": 2}):
        confirm = web.post(chosen, form).content.decode()
        assert "cancel</strong> 5 jobs" in confirm and 'id="in-background"' in confirm
        done = web.post(chosen, {**form, "post": "yes"}, follow=True)
    run = BulkRun.objects.get()
    assert (run.action, run.matched) == ("cancel", 5)
    assert run.selector == {"state": "scheduled", "q": "add"}
    assert (run.by, run.via, run.queues) == ("boss", "admin", None)
    [said] = messages_of(done)
    assert said.startswith("5 jobs: running in the background, see ")
    assert f"/bulk/runs/{run.pk}" in said
    deadline = time.monotonic() + 30
    while (run := BulkRun.objects.get()).state == "running":
        assert time.monotonic() < deadline, run
        time.sleep(0.05)
    assert (run.state, run.looked_at, run.changed) == ("done", 5, 5)
    assert set(states(engine, ids)) == {JobState.CANCELLED}
    assert LogEntry.objects.filter(change_message__contains="5 jobs matching").count() == 1


def test_an_admin_retry_skips_a_job_that_cannot_run_saying_why(
    engine: EngineSettings, admin_user: User
) -> None:
    from .test_operator_api import _unknown_task_job

    gone = _unknown_task_job(engine)
    failed = services.enqueue(t.boom).id
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    web, token = login(admin_user)
    form = {"index": "0", "csrfmiddlewaretoken": token, "post": "yes"}
    retry = {**form, "action": "retry_jobs", "_selected_action": [gone, failed]}
    assert messages_of(web.post(URL, retry, follow=True)) == [
        "1 job queued to run again",
        f"1 job was not retried: {runnable.REASON}",
    ]
    assert states(engine, [gone, failed]) == [JobState.DROPPED, JobState.SUBMITTED]


def test_admin_pages_that_need_redis_say_it_does_not_answer(
    engine: EngineSettings, admin_user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queues, workers, schedules and roles: a message that Redis does not answer (since when,
    from services/reach.py), no error page and no list passed off as empty."""
    from django.conf import settings
    from django.test import override_settings

    from engine.dev.devserver import free_port
    from jobsite.jobs import conf
    from jobsite.jobs.history.reconcile import sync_queues
    from jobsite.jobs.services import reach

    monkeypatch.setattr(reach, "_state", reach.Reach(up=True, since_ms=0))
    services.enqueue(t.add, 1, 1)
    assert sync_queues() == 1
    web, token = login(admin_user)
    up = web.get("/admin/jobsite/queuerecord/").content.decode()
    assert "Redis does not answer" not in up
    away = {**settings.JOBSITE, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    with override_settings(JOBSITE=away):
        conf.engine_settings.cache_clear()
        try:
            pages = {
                path: web.get(f"/admin/jobsite/{path}/")
                for path in ("queuerecord", "workerrecord", "schedule", "workerrecord/roles")
            }
            pause = {"_selected_action": ["default"], "index": "0", "csrfmiddlewaretoken": token}
            paused = web.post("/admin/jobsite/queuerecord/", {**pause, "action": "pause"})
            after = web.get("/admin/jobsite/queuerecord/")
        finally:
            conf.engine_settings.cache_clear()
    for path, page in pages.items():
        assert page.status_code == 200, path
        said = messages_of(page)
        assert any(m.startswith("Redis does not answer (since ") for m in said), (path, said)
    assert "not listed: Redis does not answer" in pages["schedule"].content.decode()
    assert "not listed: Redis does not answer" in pages["workerrecord/roles"].content.decode()
    assert "default" in pages["queuerecord"].content.decode()  # the rows as last copied
    assert paused.status_code == 302  # an action it cannot take: said, no error page
    assert any("the action may not have been done" in m for m in messages_of(after))
