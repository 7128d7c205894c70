"""One table: every role against every operation of every surface (API by token and by session,
admin, dashboard page, websocket). A surface allows an operation exactly when the role holds the
permission the table names; the admin is the reference the others must agree with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client as WebClient
from django.utils.timezone import now

from demo.asgi import application
from engine import EngineSettings
from engine.ops.fingerprint import fingerprint
from jobsite.jobs import services
from jobsite.jobs.history.reconcile import sync_queues
from jobsite.jobs.models import DeadLetterMute
from jobsite.jobs.permissions import OPERATORS, VIEWERS, Perm
from tests.engine import tasks as t

from .conftest import make_token, mirror_all, run_worker, staff_user
from .test_api import operations

pytestmark = pytest.mark.django_db(transaction=True)
ALL = frozenset(Perm)
# role -> the permissions it holds; anonymous and non-staff users hold none anywhere.
ROLES: dict[str, frozenset[Perm]] = {
    "anonymous": frozenset(),
    "non_staff": frozenset(),  # in the operators group, but not staff: no access at all
    "staff": frozenset(),  # staff without any permission
    "viewer": frozenset({Perm.VIEW}),
    "operator": ALL,
    "superuser": ALL,
}


# The dead-letter group of the failed jobs (tests.engine.tasks.boom); the table only counts
# it (dry_run): acting on the whole group would reach the other fixtures' jobs too.
BOOM = fingerprint("builtins.ValueError", "unexpected", "tests.engine.tasks:boom").hash
# A group's fingerprint as the schema's paths name it.
FP = "{fingerprint}"


@dataclass
class Fixture:
    """Jobs in the states the operations need, made fresh for each role."""

    scheduled: list[str]
    failed: list[str]
    # A schedule (repeatable) of queue "default", paused so that it never fires.
    schedule: str = "x"
    # A muted dead-letter group of queue "default" (its row's id), for the admin's "Unmute".
    mute: str = ""


def make_jobs(engine: EngineSettings, sets: int) -> list[Fixture]:
    """Return `sets` fresh fixtures: the failed jobs first (a burst worker waits for scheduled
    ones), then the scheduled ones."""
    failed = [[services.enqueue(t.boom).id for _ in range(3)] for _ in range(sets)]
    async_to_sync(run_worker)(engine)
    scheduled = [
        [services.enqueue(t.add.using(delay_s=600), i, i).id for i in range(2)] for _ in range(sets)
    ]
    async_to_sync(mirror_all)()
    sync_queues()  # the admin's queue rows
    names = [f"every-{i}" for i in range(sets)]
    for name in names:
        services.run_engine(
            lambda c, n=name: c.repeats.add(n, t.add.call(1, 2), every_s=60, paused=True)
        )
    muted = [
        str(DeadLetterMute.objects.create(queue="default", fingerprint=f"{i:x}", muted_at=now()).pk)
        for i in range(sets)
    ]
    rows = zip(scheduled, failed, names, muted, strict=True)
    return [Fixture(s, f, n, m) for s, f, n, m in rows]


def api_table(jobs: Fixture) -> list[tuple[str, str, Any, Perm]]:
    """Return (method, path, body, permission) for every operation of the API."""
    s, f = jobs.scheduled, jobs.failed
    return [
        ("get", "/jobs", None, Perm.VIEW),
        ("get", f"/jobs/{s[0]}", None, Perm.VIEW),
        ("get", "/queues", None, Perm.VIEW),
        ("get", "/workers", None, Perm.VIEW),
        ("get", "/live", None, Perm.VIEW),
        ("get", "/stats", None, Perm.VIEW),
        ("get", "/charts", None, Perm.VIEW),
        ("get", "/task-stats", None, Perm.VIEW),
        ("get", "/job-counts", None, Perm.VIEW),
        ("get", "/flows", None, Perm.VIEW),
        ("get", "/flows/x", None, Perm.VIEW),
        ("get", "/tasks", None, Perm.VIEW),
        ("get", "/job-counts", None, Perm.VIEW),
        ("get", "/flows", None, Perm.VIEW),
        ("get", "/flows/x", None, Perm.VIEW),
        ("get", "/task-stats", None, Perm.VIEW),
        ("get", "/dlq", None, Perm.VIEW),
        ("get", "/health", None, Perm.VIEW),
        ("post", "/jobs", {"task": "add", "args": [1, 2]}, Perm.SUBMIT),
        ("post", "/jobs/batch", {"jobs": [{"task": "add", "args": [1, 2]}]}, Perm.SUBMIT),
        ("delete", f"/jobs/{s[0]}", None, Perm.CANCEL),
        ("post", f"/jobs/{f[0]}/retry", None, Perm.RETRY),
        ("post", "/bulk/cancel", {"ids": [s[1]]}, Perm.CANCEL),
        ("post", "/bulk/retry", {"ids": [f[1]]}, Perm.RETRY),
        ("post", "/dlq/resubmit", {"queue": "default", "ids": [f[2]]}, Perm.RETRY),
        ("post", "/dlq/purge", {"queue": "default", "ids": ["not-dead"]}, Perm.PURGE),
        ("get", "/scheduled", None, Perm.VIEW),
        ("post", f"/jobs/{s[0]}/run-now", None, Perm.RETRY),
        ("post", "/bulk/run-now", {"queue": "default", "ids": [s[1]]}, Perm.RETRY),
        ("post", "/queues/default/clear", {"state": "completed", "dry_run": True}, Perm.PURGE),
        ("post", "/queues/default/pause", None, Perm.CHANGE_QUEUE),
        ("post", "/queues/default/resume", None, Perm.CHANGE_QUEUE),
        ("get", "/schedules", None, Perm.VIEW),
        ("get", f"/schedules/default/{jobs.schedule}", None, Perm.VIEW),
        (
            "post",
            "/schedules",
            {"name": f"{jobs.schedule}-new", "task": "add", "args": [1, 2], "every_s": 60},
            Perm.CHANGE_QUEUE,
        ),
        (
            "put",
            f"/schedules/default/{jobs.schedule}",
            {"task": "add", "args": [2, 2], "every_s": 30},
            Perm.CHANGE_QUEUE,
        ),
        ("post", f"/schedules/default/{jobs.schedule}/pause", None, Perm.CHANGE_QUEUE),
        ("post", f"/schedules/default/{jobs.schedule}/resume", None, Perm.CHANGE_QUEUE),
        ("post", f"/schedules/default/{jobs.schedule}/run", None, Perm.CHANGE_QUEUE),
        ("delete", f"/schedules/default/{jobs.schedule}", None, Perm.CHANGE_QUEUE),
        ("get", "/dead-letters", None, Perm.VIEW),
        ("post", f"/jobs/{f[0]}/replay", {}, Perm.RETRY),
        ("post", "/dead-letters/resubmit", {"fingerprint": BOOM, "dry_run": True}, Perm.RETRY),
        ("post", "/dead-letters/purge", {"fingerprint": BOOM, "dry_run": True}, Perm.PURGE),
        ("post", f"/dead-letters/groups/{BOOM}/mute", {"queue": "default"}, Perm.RETRY),
        ("delete", f"/dead-letters/groups/{BOOM}/mute?queue=default", None, Perm.RETRY),
        ("get", "/dead-letters/jobs", None, Perm.VIEW),
        ("get", "/dead-letters/counts", None, Perm.VIEW),
        (
            "post",
            "/dead-letters/resubmit",
            {"queue": "default", "ids": [f[1]], "dry_run": True},
            Perm.RETRY,
        ),
        ("post", "/dead-letters/purge", {"queue": "default", "ids": ["not-dead"]}, Perm.PURGE),
        ("get", "/queues/default", None, Perm.VIEW),
        ("put", "/queues/default/limits", {"rate_limit": "100/s"}, Perm.CHANGE_QUEUE),
        ("delete", "/queues/default/deduplication/some-id", None, Perm.CHANGE_QUEUE),
        ("get", "/queues/default/deduplication/some-id", None, Perm.VIEW),
        ("get", "/scaling", None, Perm.VIEW),
        ("get", "/queues/default/drain", None, Perm.VIEW),
        ("get", "/bulk/runs/1", None, Perm.VIEW),
        # A host without workers: the order reaches nobody, the permission is checked all the same.
        ("post", "/workers/control", {"action": "quiet", "host": "no-such"}, Perm.CONTROL_WORKER),
        ("get", "/roles", None, Perm.VIEW),
        ("put", "/roles/default", {"queues": ["default"]}, Perm.CHANGE_QUEUE),
        ("get", "/roles/default", None, Perm.VIEW),
        ("delete", "/roles/default", None, Perm.CHANGE_QUEUE),
        (
            "post",
            "/flows",
            {
                "jobs": [
                    {"ref": "a", "task": "add", "args": [1, 2]},
                    {"ref": "b", "task": "add", "args": [3, 4], "depends_on": ["a"]},
                ]
            },
            Perm.SUBMIT,
        ),
        # Last: it cancels the waiting jobs of the queue (in the background).
        ("post", "/queues/default/drain", None, Perm.CANCEL),
    ]


def test_the_table_covers_every_api_operation(engine: EngineSettings) -> None:
    jobs = Fixture(["x", "y"], ["x", "y", "z"])
    table = {
        (m, p.split("?")[0].replace("/x", "/{job_id}").replace("/default/", "/{name}/"))
        for m, p, *_ in api_table(jobs)
    }
    schema = {
        (m, p.replace("/x", "/{job_id}").replace("/default/", "/{name}/").replace(FP, BOOM))
        for m, p in operations()
    }
    assert schema <= table, schema - table


def make_user(role: str) -> User | None:
    if role == "anonymous":
        return None
    if role == "superuser":
        return User.objects.create_superuser(role, f"{role}@example.com", "x")
    if role == "non_staff":
        user = staff_user(role, OPERATORS)
        User.objects.filter(pk=user.pk).update(is_staff=False)
        return User.objects.get(pk=user.pk)
    return staff_user(role, {"viewer": VIEWERS, "operator": OPERATORS}.get(role))


def api_allowed(web: WebClient, headers: dict[str, str], op: tuple[str, str, Any, Perm]) -> bool:
    method, path, body, _ = op
    kwargs = {"data": body} if body is not None else {}
    response = getattr(web, method)(
        "/api/v1" + path, content_type="application/json", **headers, **kwargs
    )
    assert response.status_code < 500, (path, response.status_code, response.content)
    if response.status_code in (401, 403):
        assert "detail" in response.json()
        return False
    return True


def admin_actions(jobs: Fixture) -> list[tuple[str, str, list[str], Perm]]:
    """Return (changelist, action, selected ids, permission) for every admin action."""
    s, f = jobs.scheduled, jobs.failed
    return [
        ("/admin/jobsite/jobrecord/", "cancel_jobs", [s[0]], Perm.CANCEL),
        ("/admin/jobsite/jobrecord/", "retry_jobs", [f[0]], Perm.RETRY),
        ("/admin/jobsite/jobrecord/", "resubmit_dlq", [f[1]], Perm.RETRY),
        ("/admin/jobsite/jobrecord/", "purge_jobs", [f[2]], Perm.PURGE),
        ("/admin/jobsite/queuerecord/", "pause", ["default"], Perm.CHANGE_QUEUE),
        ("/admin/jobsite/queuerecord/", "resume", ["default"], Perm.CHANGE_QUEUE),
        ("/admin/jobsite/deadlettermute/", "unmute", [jobs.mute], Perm.RETRY),
        *[
            (
                "/admin/jobsite/schedule/",
                f"{verb}_schedules",
                [f"default/{jobs.schedule}"],
                Perm.CHANGE_QUEUE,
            )
            for verb in ("pause", "resume", "run", "delete")
        ],
    ]


def admin_allowed(web: WebClient, action: tuple[str, str, list[str], Perm]) -> bool:
    """Run an admin action (confirmed); it was allowed if it left an audit entry."""
    url, name, ids, _ = action
    before = LogEntry.objects.count()
    form = {"action": name, "_selected_action": ids, "index": "0", "post": "yes"}
    response = web.post(url, form)
    assert response.status_code in (200, 302, 403), (name, response.status_code)
    return LogEntry.objects.count() > before


def page_allowed(web: WebClient, url: str) -> bool:
    response = web.get(url)
    assert response.status_code in (200, 302, 403), (url, response.status_code)
    return response.status_code == 200


def socket_allowed(web: WebClient) -> bool:
    cookie = web.cookies.get("sessionid")
    headers = [(b"origin", b"http://localhost:8000"), (b"host", b"localhost:8000")]
    if cookie is not None:
        headers.append((b"cookie", f"sessionid={cookie.value}".encode()))

    async def go() -> bool:
        socket = WebsocketCommunicator(application, "/ws/jobsite/dashboard/", headers=headers)
        connected, _ = await socket.connect(timeout=5)
        await socket.disconnect()
        return bool(connected)

    return async_to_sync(go)()


@pytest.mark.parametrize("role", list(ROLES))
def test_every_role_against_every_operation(engine: EngineSettings, role: str) -> None:
    held = ROLES[role]
    user = make_user(role)
    web = WebClient()
    if user is not None:
        web.force_login(user)
    token = {"HTTP_AUTHORIZATION": f"Bearer {make_token(user)}"} if user else {}
    seen: dict[tuple[str, str], tuple[bool, bool]] = {}

    fixtures = make_jobs(engine, 3)
    for surface, headers in (("api-session", {}), ("api-token", token)):
        jobs = fixtures.pop()
        caller = web if surface == "api-session" else WebClient()
        for op in api_table(jobs):
            seen[(surface, f"{op[0]} {op[1]}")] = (api_allowed(caller, headers, op), op[3] in held)

    jobs = fixtures.pop()
    pages = {
        "/admin/jobsite/jobrecord/": Perm.VIEW,
        f"/admin/jobsite/jobrecord/{jobs.scheduled[0]}/change/": Perm.VIEW,
        "/admin/jobsite/queuerecord/": Perm.VIEW,
        "/admin/jobsite/workerrecord/": Perm.VIEW,
        "/dashboard/": Perm.VIEW,
        "/dashboard/jobs/": Perm.VIEW,
        f"/dashboard/jobs/{jobs.scheduled[0]}/": Perm.VIEW,
        "/dashboard/schedules/": Perm.VIEW,
        "/admin/jobsite/schedule/": Perm.VIEW,
        "/admin/jobsite/schedule/add/": Perm.CHANGE_QUEUE,
        f"/admin/jobsite/schedule/default/{jobs.schedule}/change/": Perm.CHANGE_QUEUE,
        "/dashboard/dead-letters/": Perm.VIEW,
        "/dashboard/flows/": Perm.VIEW,
        "/dashboard/queues/": Perm.VIEW,
        "/dashboard/roles/": Perm.VIEW,
        "/dashboard/workers/": Perm.VIEW,
        "/admin/jobsite/workerrecord/roles/": Perm.VIEW,
        "/admin/jobsite/deadlettermute/": Perm.VIEW,
    }
    for url, perm in pages.items():
        seen[("page", url)] = (page_allowed(web, url), perm in held)
    for action in admin_actions(jobs):
        seen[("admin", action[1])] = (admin_allowed(web, action), action[3] in held)
    seen[("websocket", "connect")] = (socket_allowed(web), Perm.VIEW in held)

    wrong = {k: v for k, v in seen.items() if v[0] != v[1]}
    assert not wrong, f"{role}: (allowed, expected) differ for {wrong}"
    if Perm.VIEW in held:  # the dashboard offers exactly the actions the user may take
        may = web.get("/dashboard/").context["config"]["may"]
        assert may == {p.name.lower(): p in held for p in Perm}
