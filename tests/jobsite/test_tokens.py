"""API tokens: owned by their maker, scoped to permissions and queues, expiring, shown once."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client as WebClient
from django.utils import timezone

from engine import EngineSettings
from jobsite.jobs import services
from jobsite.jobs.api.tokens import digest
from jobsite.jobs.models import ApiToken
from jobsite.jobs.permissions import OPERATORS, Perm
from tests.engine import tasks as t

from .conftest import make_token, mirror_all, staff_user

pytestmark = pytest.mark.django_db(transaction=True)
TOKENS = "/admin/jobsite/apitoken/"


def api(method: str, path: str, key: str, **kw: Any) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    return getattr(WebClient(), method)(
        "/api/v1" + path, content_type="application/json", **headers, **kw
    )


def test_a_token_never_exceeds_its_scope(engine: EngineSettings) -> None:
    from asgiref.sync import async_to_sync

    operator = staff_user("op", OPERATORS)
    job = services.enqueue(t.add.using(delay_s=600), 1, 2)
    async_to_sync(mirror_all)()
    read_only = make_token(operator, permissions=[Perm.VIEW])
    assert api("get", f"/jobs/{job.id}", read_only).status_code == 200
    refused = api("delete", f"/jobs/{job.id}", read_only)
    assert refused.status_code == 403 and "token is not allowed" in refused.json()["detail"]

    elsewhere = make_token(operator, queues=["billing"])
    assert api("get", "/jobs", elsewhere).json()["items"] == []  # other queues are not listed
    assert api("get", f"/jobs/{job.id}", elsewhere).status_code == 403
    assert api("delete", f"/jobs/{job.id}", elsewhere).status_code == 403
    assert api("post", "/bulk/cancel", elsewhere, data={"all": True}).json()["matched"] == 0
    assert api("get", "/queues", elsewhere).json() == []

    mine = make_token(operator, queues=["default"])
    assert api("delete", f"/jobs/{job.id}", mine).status_code == 202

    # A token acts as its user, never beyond: the user's rights shrink, so does the token's.
    operator.groups.clear()
    assert api("get", "/jobs", mine).status_code == 403


def test_expired_revoked_and_inactive_tokens_are_refused(engine: EngineSettings) -> None:
    user = staff_user("op", OPERATORS)
    past = make_token(user, expires_at=timezone.now() - timedelta(seconds=1))
    future = make_token(user, expires_at=timezone.now() + timedelta(hours=1))
    assert api("get", "/tasks", past).status_code == 401
    assert api("get", "/tasks", future).status_code == 200
    User.objects.filter(pk=user.pk).update(is_active=False)
    assert api("get", "/tasks", future).status_code == 401


def test_last_used_is_written_at_most_once_a_minute(engine: EngineSettings) -> None:
    key = make_token(staff_user("op", OPERATORS))
    for _ in range(5):
        assert api("get", "/tasks", key).status_code == 200
    row = ApiToken.objects.get(key_hash=digest(key))
    first = row.last_used_at
    assert first is not None
    api("get", "/tasks", key)
    assert ApiToken.objects.get(pk=row.pk).last_used_at == first


def _add_token(web: WebClient, **fields: Any) -> Any:
    form = web.get(TOKENS + "add/")
    assert form.status_code == 200
    return web.post(
        TOKENS + "add/", {"name": "ci", "queues": "", "permissions": [], **fields}, follow=False
    )


def test_staff_make_tokens_for_themselves_only(engine: EngineSettings) -> None:
    boss = User.objects.create_superuser("boss", "b@example.com", "x")
    clerk = staff_user("clerk", OPERATORS)
    clerk.user_permissions.add(*Permission.objects.filter(codename__endswith="_apitoken"))
    web = WebClient()
    web.force_login(clerk)
    assert b'name="owner"' not in web.get(TOKENS + "add/").content
    made = _add_token(web, owner=boss.pk, user=boss.pk, permissions=[Perm.VIEW])
    assert made.status_code == 200
    key = made.context["key"]
    row = ApiToken.objects.get(key_hash=digest(key))
    assert row.user == clerk and row.permissions == [Perm.VIEW]  # owner/user fields ignored
    assert key.encode() in made.content and key not in str(web.cookies)  # never in a cookie
    # the key is never shown again, and the owner cannot be changed
    change = web.get(f"{TOKENS}{row.pk}/change/")
    assert key.encode() not in change.content and b'name="user"' not in change.content
    web.post(f"{TOKENS}{row.pk}/change/", {"name": "ci2", "user": boss.pk, "queues": ""})
    assert ApiToken.objects.get(pk=row.pk).user == clerk
    # a clerk sees only their own tokens
    other = make_token(boss)
    other_row = ApiToken.objects.get(key_hash=digest(other))
    assert web.get(f"{TOKENS}{other_row.pk}/change/").status_code == 302  # "does not exist"

    web.force_login(boss)
    assert b'name="owner"' in web.get(TOKENS + "add/").content
    made = _add_token(web, owner=clerk.pk, queues="default, billing")
    row = ApiToken.objects.get(key_hash=digest(made.context["key"]))
    assert row.user == clerk and row.queues == ["default", "billing"]
    bad = _add_token(web, owner=clerk.pk, queues="no/such")
    assert bad.status_code == 200 and "not a queue name" in bad.content.decode()


def test_the_token_form_speaks_in_labels_and_revokes_only_by_its_action(
    engine: EngineSettings,
) -> None:
    boss = User.objects.create_superuser("boss", "b@example.com", "x")
    web = WebClient()
    web.force_login(boss)
    add = web.get(TOKENS + "add/").content.decode()
    assert 'name="revoked_at' not in add and "Revoked at" not in add  # nothing to revoke yet
    for perm in Perm:
        assert perm.label in add and perm.full not in add  # the labels, never the codenames
    made = _add_token(web, owner=boss.pk, permissions=[Perm.CANCEL], revoked_at_0="2026-01-01")
    row = ApiToken.objects.get(key_hash=digest(made.context["key"]))
    assert row.revoked_at is None and row.permissions == [Perm.CANCEL]
    change = web.get(f"{TOKENS}{row.pk}/change/").content.decode()
    assert "Revoked at" in change and 'name="revoked_at' not in change  # shown, read-only
    assert re.search(r'value="cancel_job"[^>]*checked', change)  # its scope, kept
    web.post(
        f"{TOKENS}{row.pk}/change/",
        {"name": "ci", "queues": "", "revoked_at_0": "2026-01-01", "revoked_at_1": "00:00"},
    )
    assert ApiToken.objects.get(pk=row.pk).revoked_at is None
    listed = web.post(
        TOKENS, {"action": "revoke", "_selected_action": [row.pk], "index": "0"}, follow=True
    )
    assert ApiToken.objects.get(pk=row.pk).revoked_at is not None
    assert "1 token revoked" in listed.content.decode()
