"""Worker roles against a token narrowed to queues and against unserved queues: a change needs
the permission on the queues of the live workers following the role's name too (a deleted
role's workers included), reads hide every role touching a queue outside the token's, and a
role names only queues of JOBSITE["QUEUES"] (unless ANY_QUEUE), in the API, the admin and
the services alike."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client as WebClient
from django.test import override_settings

from engine import ConfigError, EngineSettings, Worker
from jobsite.jobs import conf, services
from jobsite.jobs.permissions import OPERATORS, VIEWERS
from jobsite.jobs.services.roles import remove_role, role, save_role

from .conftest import make_token, staff_user

pytestmark = pytest.mark.django_db(transaction=True)
QUEUES = ["default", "billing"]


@pytest.fixture
def two_queues(engine: EngineSettings) -> Iterator[EngineSettings]:
    """JOBSITE["QUEUES"] = default and billing (a token scoped to billing)."""
    from django.conf import settings

    with override_settings(JOBSITE={**settings.JOBSITE, "QUEUES": QUEUES}):
        conf.engine_settings.cache_clear()
        yield conf.engine_settings()
    conf.engine_settings.cache_clear()


def api(method: str, path: str, key: str, body: Any = None) -> Any:
    kwargs: dict[str, Any] = {"content_type": "application/json"}
    if body is not None:
        kwargs["data"] = json.dumps(body)
    return getattr(WebClient(), method)(
        "/api/v1" + path, HTTP_AUTHORIZATION=f"Bearer {key}", **kwargs
    )


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def serving(worker: Worker) -> str | None:
    """Return the queues a live worker serves now, as the registry shows them."""
    found = [w for w in services.run_engine(lambda c: c.workers.list()) if w["id"] == worker.id]
    return str(found[0]["queues"]) if found else None


@contextmanager
def following(settings: EngineSettings, name: str, heartbeat_s: float) -> Iterator[Worker]:
    """Run a worker following role `name` (re-read every `heartbeat_s`) in a thread."""
    lease_ms = max(settings.lease_ms, int(heartbeat_s * 4000))
    beat = dataclasses.replace(settings, heartbeat_interval_s=heartbeat_s, lease_ms=lease_ms)
    worker = Worker(beat, [], role=name)
    thread = threading.Thread(target=asyncio.run, args=(worker.run(),))
    thread.start()
    try:
        wait_for(lambda: serving(worker) is not None, "the worker never registered")
        yield worker
    finally:
        if worker._loop is not None and not worker._loop.is_closed():
            worker._loop.call_soon_threadsafe(worker.stop)
        thread.join(10)


def test_a_billing_token_cannot_move_a_deleted_roles_default_worker(
    two_queues: EngineSettings,
) -> None:
    """A role r1 (default) deleted while a worker follows it; the billing token
    may not recreate it on billing, an unscoped operator may, and both the answer and the
    audit name the worker that moved."""
    billing = make_token(staff_user("billing-op", OPERATORS), queues=["billing"])
    admin = make_token(staff_user("admin", OPERATORS))
    assert api("put", "/roles/r1", admin, {"queues": ["default"]}).status_code == 201
    with following(two_queues, "r1", heartbeat_s=0.05) as worker:
        assert serving(worker) == "default"
        assert api("delete", "/roles/r1", admin).status_code == 204
        refused = api("put", "/roles/r1", billing, {"queues": ["billing"]})
        assert refused.status_code == 403, refused.content
        assert "default" not in refused.json()["detail"]  # a queue it may not see: not named
        assert role("r1") is None
        time.sleep(0.3)  # several renewals: had the role been written, the worker would move
        assert serving(worker) == "default"

        made = api("put", "/roles/r1", admin, {"queues": ["billing"]})
        assert made.status_code == 201, made.content
        assert made.json()["workers"] == [worker.id] and made.json()["moved"] == [worker.id]
        wait_for(lambda: serving(worker) == "billing", "the worker did not follow the role")
        again = api("put", "/roles/r1", admin, {"queues": ["billing"]})
        assert again.status_code == 200 and again.json()["moved"] == []  # already there
    logged = set(LogEntry.objects.values_list("object_id", "change_message"))
    assert (
        "role/r1",
        f"create via API token 'admin-token': queues billing; moved workers {worker.id}",
    ) in logged


def test_followers_queues_guard_changes_and_reads(two_queues: EngineSettings) -> None:
    """A role now on billing whose worker still serves default (it has not re-read the role
    yet): the billing token may neither change, delete nor see it."""
    billing = make_token(staff_user("billing-op", OPERATORS), queues=["billing"])
    viewer = make_token(staff_user("billing-view", VIEWERS), queues=["billing"])
    everyone = make_token(staff_user("view", VIEWERS))
    save_role("r1", ["default"])
    with following(two_queues, "r1", heartbeat_s=30) as worker:  # no re-read while we look
        save_role("r1", ["billing"])
        assert serving(worker) == "default"
        for method, body in (("put", {"queues": ["billing"]}), ("delete", None)):
            refused = api(method, "/roles/r1", billing, body)
            assert refused.status_code == 403, (method, refused.content)
            assert "default" not in refused.json()["detail"]
        assert api("get", "/roles/r1", viewer).status_code == 404
        assert api("get", "/roles", viewer).json() == []
        assert worker.id not in api("get", "/roles", viewer).content.decode()
        shown = api("get", "/roles/r1", everyone).json()  # unscoped: seen, with its worker
        assert shown["queues"] == ["billing"] and shown["workers"] == [worker.id]
        found = role("r1")
        assert found is not None and found.role.queues == ("billing",)
        assert serving(worker) == "default"


def test_reads_narrow_to_the_tokens_queues(two_queues: EngineSettings) -> None:
    save_role("d", ["default"])
    save_role("b", ["billing"])
    save_role("both", ["billing", "default"])
    narrow = make_token(staff_user("billing-view", VIEWERS), queues=["billing"])
    wide = make_token(staff_user("view", VIEWERS))
    assert [r["name"] for r in api("get", "/roles", narrow).json()] == ["b"]
    assert [r["name"] for r in api("get", "/roles", wide).json()] == ["b", "both", "d"]
    assert api("get", "/roles/b", narrow).status_code == 200
    for hidden in ("d", "both"):
        answer = api("get", f"/roles/{hidden}", narrow)
        assert answer.status_code == 404, hidden  # as if absent
        assert answer.json() == {"detail": f"no role named {hidden!r}"}
        assert api("get", f"/roles/{hidden}", wide).status_code == 200


def test_a_queue_outside_jobsite_queues_is_refused_everywhere(two_queues: EngineSettings) -> None:
    key = make_token(staff_user("op", OPERATORS))
    answer = api("put", "/roles/r", key, {"queues": ["billing", "nowhere"]})
    assert answer.status_code == 422 and "'nowhere'" in answer.json()["detail"], answer.content
    with pytest.raises(ConfigError, match="'nowhere'"):
        save_role("r", ["nowhere"])
    web = WebClient()
    web.force_login(staff_user("admin-op", OPERATORS))
    page = web.post(
        "/admin/jobsite/workerrecord/roles/", {"save": "1", "name": "r", "queues": "nowhere"}
    )
    assert page.status_code == 200 and "&#x27;nowhere&#x27;" in page.content.decode()
    assert role("r") is None and not LogEntry.objects.exists()


def test_any_queue_allows_it_with_a_warning(
    two_queues: EngineSettings, caplog: pytest.LogCaptureFixture
) -> None:
    from django.conf import settings

    key = make_token(staff_user("op", OPERATORS))
    anywhere = override_settings(JOBSITE={**settings.JOBSITE, "ANY_QUEUE": True})
    with anywhere, caplog.at_level(logging.WARNING, logger="jobsite.roles"):
        answer = api("put", "/roles/r", key, {"queues": ["billing", "nowhere"]})
    assert answer.status_code == 201, answer.content
    (line,) = [r.getMessage() for r in caplog.records if r.name == "jobsite.roles"]
    assert "role=r queues=nowhere" in line
    assert remove_role("r") is not None
