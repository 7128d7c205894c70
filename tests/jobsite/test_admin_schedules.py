"""Schedules in the Django admin: list, add, edit (declared ones become overridden), actions."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.test import Client as WebClient
from django.test import override_settings

from engine import Client, EngineSettings
from jobsite.jobs.permissions import OPERATORS, VIEWERS
from jobsite.jobs.services.schedules import schedule
from jobsite.jobs.tasks import schedules
from tests.engine import tasks as t

from .conftest import staff_user

pytestmark = pytest.mark.django_db(transaction=True)
LIST = "/admin/jobsite/schedule/"
FORM = {
    "name": "nightly",
    "queue": "",
    "task": "add",
    "args": "[1, 2]",
    "kwargs": "{}",
    "every_s": "",
    "cron": "0 3 * * *",
    "tz": "Europe/Paris",
}


def operator() -> WebClient:
    web = WebClient()
    web.force_login(staff_user("op", OPERATORS))
    return web


def test_add_edit_and_list(engine: EngineSettings) -> None:
    web = operator()
    assert "Schedules" in web.get("/admin/").content.decode()
    bad = web.post(f"{LIST}add/", {**FORM, "cron": "61 * * * *"})
    assert bad.status_code == 200 and "invalid cron expression" in bad.content.decode()
    bad = web.post(f"{LIST}add/", {**FORM, "args": "[1]"})
    assert "missing a required argument" in bad.content.decode()
    bad = web.post(f"{LIST}add/", {**FORM, "args": "{"})
    assert "not JSON" in bad.content.decode()
    assert schedule("default", "nightly") is None  # nothing stored by the bad ones

    made = web.post(f"{LIST}add/", FORM)
    assert made.status_code == 302, made.content.decode()
    stored = schedule("default", "nightly")
    assert stored is not None and (stored.rep.cron, stored.rep.tz) == ("0 3 * * *", "Europe/Paris")
    page = web.get(LIST).content.decode()
    assert "default/nightly" in page and "0 3 * * *" in page and "runtime" in page
    assert len(stored.next_runs_ms) == 5
    assert web.post(f"{LIST}add/", FORM).status_code == 200  # the name is taken

    edit = f"{LIST}default/nightly/change/"
    assert 'value="0 3 * * *"' in web.get(edit).content.decode()
    changed = web.post(edit, {**FORM, "cron": "", "every_s": "30", "name": "ignored"})
    assert changed.status_code == 302, changed.content.decode()
    edited = schedule("default", "nightly")
    assert edited is not None and (edited.rep.every_s, edited.rep.cron) == (30, None)
    audited = LogEntry.objects.filter(object_id="default/nightly")
    assert sorted(audited.values_list("change_message", flat=True)) == [
        "create via admin",
        "edit via admin",
    ]


def test_actions_and_a_declared_schedule(engine: EngineSettings) -> None:
    entry = {"name": "declared", "task": "add", "args": [1, 2], "every_s": 3600}
    with override_settings(JOBSITE={**settings.JOBSITE, "SCHEDULES": [entry]}):
        async_to_sync(schedules.sync)(schedules.declared())
    web = operator()
    assert "settings" in web.get(LIST).content.decode()
    form = {"action": "pause_schedules", "_selected_action": ["default/declared"]}
    assert web.post(LIST, form).status_code == 302
    paused = schedule("default", "declared")
    assert paused is not None and paused.rep.paused and paused.rep.overridden
    assert "(overridden)" in web.get(LIST).content.decode()
    web.post(LIST, {**form, "action": "run_schedules"})
    ran = schedule("default", "declared")
    assert ran is not None and ran.last_run is not None and ran.last_run.manual
    assert ran.last_run.id in web.get(LIST).content.decode()  # linked to its job page
    web.post(LIST, {**form, "action": "delete_schedules"})
    assert schedule("default", "declared") is None
    messages = LogEntry.objects.filter(object_id="default/declared").values_list(
        "change_message", flat=True
    )
    assert [m.split(" via ")[0] for m in messages.order_by("id")] == ["pause", "run", "delete"]


def test_viewers_see_but_do_not_change(engine: EngineSettings) -> None:
    operator().post(f"{LIST}add/", {**FORM, "cron": "", "every_s": "60"})
    web = WebClient()
    web.force_login(staff_user("viewer", VIEWERS))
    page = web.get(LIST)
    assert page.status_code == 200 and "default/nightly" in page.content.decode()
    assert (
        "Add schedule" not in page.content.decode() and "Go</button>" not in page.content.decode()
    )
    form = {"action": "delete_schedules", "_selected_action": ["default/nightly"]}
    assert web.post(LIST, form).status_code == 403
    assert web.get(f"{LIST}add/").status_code == 403
    assert web.post(f"{LIST}default/nightly/change/", FORM).status_code == 403
    assert schedule("default", "nightly") is not None


def test_a_repeat_limit_and_a_scheduled_flow_in_the_admin(engine: EngineSettings) -> None:
    web = operator()
    made = web.post(f"{LIST}add/", {**FORM, "repeat_limit": "3"})
    assert made.status_code == 302, made.content.decode()
    stored = schedule("default", "nightly")
    assert stored is not None and stored.rep.repeat_limit == 3
    assert "0 of 3 runs fired, 3 left" in web.get(LIST).content.decode()
    assert web.post(f"{LIST}add/", {**FORM, "name": "x", "repeat_limit": "0"}).status_code == 200

    async def add_flow() -> None:
        async with Client(engine) as client:
            first = t.add.call(1, 1)
            await client.repeats.add(
                "etl", [first, t.add.using(depends_on=[first.id]).call(2, 2)], every_s=60
            )

    async_to_sync(add_flow)()
    assert "flow of 2 jobs" in web.get(LIST).content.decode()
    refused = web.get(f"{LIST}default/etl/change/")  # this form holds one call: not for a flow
    assert refused.status_code == 302
    flow = schedule("default", "etl")
    assert flow is not None and flow.rep.flow is not None and len(flow.rep.flow) == 2
