"""Muting a dead-letter group: one door (services/mutes.py) behind the API, the client and the
admin; a muted group's dead letters stay counted but raise no health alert until unmuted or
until the mute ends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client as WebClient
from django.test import override_settings
from django.utils import timezone

from demo.asgi import application as asgi_app
from engine import Client, ConfigError, EngineSettings, Worker
from engine.ops.fingerprint import fingerprint
from jobsite.client import AsyncJobsiteClient, NotFound, Unauthorized
from jobsite.jobs.history import health
from jobsite.jobs.models import DeadLetterMute
from jobsite.jobs.permissions import OPERATORS, VIEWERS, Grant, Perm
from jobsite.jobs.services import mutes
from jobsite.jobs.tasks.registry import load_tasks
from jobsite.jobs.tasks.signals import WORKER_HOOKS
from tests.engine import tasks as t

from .conftest import MODULES, make_token, mirror_all, staff_user
from .test_client import sync_client

pytestmark = pytest.mark.django_db(transaction=True)
BASE = "/api/v1"
# The group of tests.engine.tasks.boom's failures.
BOOM = fingerprint("builtins.ValueError", "unexpected", "tests.engine.tasks:boom").hash
MUTE = f"/dead-letters/groups/{BOOM}/mute"
# A queue health judges from its dead letters alone: not configured, so no worker is missed.
PARTNER = "partner"


def call(token: str, method: str, path: str, body: Any = None) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    kwargs = {"data": body} if body is not None else {}
    return getattr(WebClient(), method)(
        BASE + path, content_type="application/json", **headers, **kwargs
    )


def fail_boom(engine: EngineSettings, queue: str = "default", n: int = 3) -> None:
    """Fail `n` boom jobs in `queue` (a worker serving it) and mirror them."""

    async def go() -> None:
        async with Client(engine) as client:
            for _ in range(n):
                await client.enqueue(t.boom.using(queue=queue))
        worker = Worker(engine, load_tasks(MODULES), queues=[queue], burst=True, hooks=WORKER_HOOKS)
        await worker.run()
        await mirror_all(queues=(queue,))

    async_to_sync(go)()


def operator() -> User:
    return staff_user("op", OPERATORS)


def test_a_mute_is_stored_replaced_and_lifted_each_change_audited(engine: EngineSettings) -> None:
    rights = Grant(operator())
    before = timezone.now()
    row = mutes.mute(rights, "default", BOOM, for_s=3600, reason="partner down until Monday")
    assert row.until is not None
    assert before + timedelta(seconds=3599) < row.until <= timezone.now() + timedelta(hours=1)
    assert (row.muted_by, row.reason) == (rights.user, "partner down until Monday")
    again = mutes.mute(rights, "default", BOOM)  # replaces: until unmuted now
    assert DeadLetterMute.objects.get().pk == again.pk and again.until is None
    assert list(mutes.muted()) == ["default"] and BOOM in mutes.muted()["default"]
    lifted = mutes.unmute(rights, "default", BOOM)
    assert lifted is not None and lifted.until is None
    assert not DeadLetterMute.objects.exists()
    assert mutes.unmute(rights, "default", BOOM) is None
    said = list(LogEntry.objects.order_by("pk").values_list("object_repr", "change_message"))
    assert said == [
        (
            f"default/{BOOM}",
            f"mute via session: until {row.until.isoformat(timespec='seconds')}; "
            "partner down until Monday",
        ),
        (f"default/{BOOM}", "mute via session: until unmuted"),
        (f"default/{BOOM}", "unmute via session: unmuted"),
    ]


@pytest.mark.parametrize(
    "queue, fp, for_s, reason",
    [
        ("default", "XYZ", None, ""),
        ("default", "", None, ""),
        ("bad queue", BOOM, None, ""),
        ("default", BOOM, 0, ""),
        ("default", BOOM, mutes.MAX_FOR_S + 1, ""),
        ("default", BOOM, None, "x" * (mutes.REASON_CHARS + 1)),
    ],
)
def test_a_mute_with_bad_input_is_refused_and_changes_nothing(
    engine: EngineSettings, queue: str, fp: str, for_s: int | None, reason: str
) -> None:
    with pytest.raises(ConfigError):
        mutes.mute(Grant(operator()), queue, fp, for_s, reason)
    assert not DeadLetterMute.objects.exists() and not LogEntry.objects.exists()


def test_the_api_mutes_lists_and_unmutes_a_group(engine: EngineSettings, token: str) -> None:
    fail_boom(engine)
    body = {"queue": "default", "for_s": 86_400, "reason": "partner API down"}
    answer = call(token, "post", MUTE, body)
    assert answer.status_code == 200, answer.content
    mute = answer.json()
    assert (mute["queue"], mute["fingerprint"], mute["muted_by"]) == ("default", BOOM, "robot")
    assert mute["reason"] == "partner API down" and mute["until"] > mute["muted_at"]
    [group] = call(token, "get", "/dead-letters").json()
    assert group["count"] == 3  # still counted
    assert group["muted"] is True and group["muted_until"] == mute["until"]
    assert group["mutes"] == [mute]
    assert call(token, "delete", f"{MUTE}?queue=default").status_code == 204
    [group] = call(token, "get", "/dead-letters").json()
    assert (group["muted"], group["muted_until"], group["mutes"]) == (False, None, [])
    gone = call(token, "delete", f"{MUTE}?queue=default")
    assert gone.status_code == 404 and "not muted" in gone.json()["detail"]
    assert [e.change_message.split(":")[0] for e in LogEntry.objects.order_by("pk")] == [
        "mute via API token 'robot-token'",
        "unmute via API token 'robot-token'",
    ]


def test_the_api_checks_a_mutes_body_and_path(engine: EngineSettings, token: str) -> None:
    for body in ({}, {"queue": "default", "for_s": 0}, {"queue": "a b"}, {"queue": "d", "x": 1}):
        assert call(token, "post", MUTE, body).status_code == 422, body
    assert call(token, "post", "/dead-letters/groups/NOPE/mute", {"queue": "d"}).status_code == 422
    assert call(token, "delete", MUTE).status_code == 422  # which queue?
    assert not DeadLetterMute.objects.exists()


def test_a_token_narrowed_to_another_queue_or_without_retry_may_not_mute(
    engine: EngineSettings,
) -> None:
    mutes.mute(Grant(operator()), "default", BOOM)
    narrow = make_token(staff_user("narrow", OPERATORS), queues=["other"])
    refused = call(narrow, "post", MUTE, {"queue": "default"})
    assert refused.status_code == 403 and "queue 'default'" in refused.json()["detail"]
    assert call(narrow, "delete", f"{MUTE}?queue=default").status_code == 403
    assert call(narrow, "post", MUTE, {"queue": "other"}).status_code == 200  # its own queue
    viewer = make_token(staff_user("viewer", VIEWERS))
    assert call(viewer, "post", MUTE, {"queue": "default"}).status_code == 403
    no_retry = make_token(staff_user("purger", OPERATORS), permissions=[Perm.PURGE.value])
    assert call(no_retry, "delete", f"{MUTE}?queue=default").status_code == 403
    assert set(DeadLetterMute.objects.values_list("queue", flat=True)) == {"default", "other"}


def test_a_session_mutes_only_with_its_csrf_token(engine: EngineSettings) -> None:
    web = WebClient(enforce_csrf_checks=True)
    web.force_login(operator())
    body = {"queue": "default"}
    refused = web.post(BASE + MUTE, body, content_type="application/json")
    assert refused.status_code in (401, 403) and not DeadLetterMute.objects.exists()
    web.get("/admin/")
    csrf = web.cookies["csrftoken"].value
    done = web.post(BASE + MUTE, body, content_type="application/json", HTTP_X_CSRFTOKEN=csrf)
    assert done.status_code == 200, done.content
    gone = web.delete(f"{BASE}{MUTE}?queue=default")
    assert gone.status_code in (401, 403) and DeadLetterMute.objects.exists()
    assert web.delete(f"{BASE}{MUTE}?queue=default", HTTP_X_CSRFTOKEN=csrf).status_code == 204


def partner_alerts() -> list[dict[str, Any]]:
    return [a for a in health.check() if a["queue"] == PARTNER]


def dlq_reasons() -> list[str]:
    [verdict] = health.queue_health([PARTNER])
    return [r for r in verdict.reasons if "dead-letter queue" in r]


def test_a_muted_group_raises_no_alert_until_unmuted_or_its_mute_ends(
    engine: EngineSettings,
) -> None:
    rights = Grant(operator())
    with override_settings(JOBSITE={**settings.JOBSITE, "HEALTH": {"DLQ_GROWTH": 3}}):
        health.queue_health([PARTNER], record=True)  # the window starts with an empty DLQ
        mutes.mute(rights, PARTNER, BOOM, reason="partner API down")
        fail_boom(engine, PARTNER)
        assert partner_alerts() == []  # a first "ok" is no change
        [verdict] = health.queue_health([PARTNER])
        assert verdict.verdict == "ok" and dlq_reasons() == []
        assert verdict.figures["dlq"] == 3  # counted all the same, and said muted
        assert (verdict.figures["dlq_muted"], verdict.figures["dlq_growth_muted"]) == (3, 3)

        mutes.unmute(rights, PARTNER, BOOM)
        [alert] = partner_alerts()
        assert (alert["state"], alert["previous"]) == ("degraded", "ok")
        assert dlq_reasons() == ["its dead-letter queue grew by 3 within 300 s (now 3)"]

        mutes.mute(rights, PARTNER, BOOM, for_s=3600)
        [alert] = partner_alerts()
        assert (alert["state"], alert["previous"]) == ("ok", "degraded")
        DeadLetterMute.objects.update(until=timezone.now() - timedelta(seconds=1))  # it ended
        [alert] = partner_alerts()
        assert (alert["state"], alert["previous"]) == ("degraded", "ok")


def test_only_the_unmuted_dead_letters_count_toward_the_growth(engine: EngineSettings) -> None:
    with override_settings(JOBSITE={**settings.JOBSITE, "HEALTH": {"DLQ_GROWTH": 2}}):
        health.queue_health([PARTNER], record=True)
        mutes.mute(Grant(operator()), PARTNER, BOOM)
        fail_boom(engine, PARTNER, n=2)

        async def other_failures() -> None:
            async with Client(engine) as client:
                for n in (1, 2):
                    await client.enqueue(t.lookup.using(queue=PARTNER), f"r-{n}")
            tasks = load_tasks(MODULES)
            await Worker(engine, tasks, queues=[PARTNER], burst=True, hooks=WORKER_HOOKS).run()
            await mirror_all(queues=(PARTNER,))

        async_to_sync(other_failures)()
        assert dlq_reasons() == [
            "its dead-letter queue grew by 2 within 300 s, not counting 2 of muted groups "
            "(now 4, 2 muted)"
        ]


def test_the_client_mutes_and_unmutes_a_group(engine: EngineSettings, token: str) -> None:
    fail_boom(engine)
    with sync_client(token) as api:
        mute = api.mute_dead_letter_group(BOOM, "default", for_s=604_800, reason="until Monday")
        assert (mute["fingerprint"], mute["reason"]) == (BOOM, "until Monday")
        [group] = api.dead_letter_groups()
        assert group["muted"] and group["muted_until"] == mute["until"]
        assert api.unmute_dead_letter_group(BOOM, "default") is None
        with pytest.raises(NotFound):
            api.unmute_dead_letter_group(BOOM, "default")
    narrow = make_token(staff_user("narrow", OPERATORS), queues=["other"])

    async def refused() -> None:
        transport = httpx.ASGITransport(app=asgi_app)
        async with AsyncJobsiteClient("http://testserver", narrow, transport=transport) as api:
            with pytest.raises(Unauthorized):
                await api.mute_dead_letter_group(BOOM, "default")
            assert (await api.mute_dead_letter_group(BOOM, "other"))["until"] is None

    async_to_sync(refused)()


ADMIN = "/admin/jobsite/deadlettermute/"


def test_the_admin_lists_mutes_and_unmutes_through_the_same_door(
    engine: EngineSettings,
) -> None:
    rights = Grant(operator())
    kept = mutes.mute(rights, "default", "ab", reason="kept")
    lifted = mutes.mute(rights, "other", BOOM, for_s=60, reason="partner API down")
    viewer = WebClient()
    viewer.force_login(staff_user("viewer", VIEWERS))
    page = viewer.get(ADMIN)
    assert page.status_code == 200 and b"partner API down" in page.content
    form = {"action": "unmute", "_selected_action": [str(lifted.pk)], "index": "0"}
    viewer.post(ADMIN, form)  # no such action for a viewer
    assert DeadLetterMute.objects.count() == 2
    web = WebClient()
    web.force_login(staff_user("admin-op", OPERATORS))
    answer = web.post(ADMIN, form, follow=True)
    assert b"1 group unmuted" in answer.content
    assert list(DeadLetterMute.objects.values_list("pk", flat=True)) == [kept.pk]
    entry = LogEntry.objects.order_by("pk").last()
    assert entry is not None and entry.change_message == "unmute via admin: unmuted"
    assert web.get(f"{ADMIN}{kept.pk}/change/").status_code == 200  # read-only, never edited
    assert web.post(f"{ADMIN}{kept.pk}/delete/").status_code == 403
