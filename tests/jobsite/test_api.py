"""The JSON API: auth on every operation, the job lifecycle, and bad input without 500s."""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client as WebClient
from django.test import override_settings
from django.urls import get_resolver

from engine import Client as EngineClient
from engine import ConfigError, EngineSettings
from engine.dev.devserver import free_port
from engine.seam.rows import BeginJob
from jobsite.jobs import conf, services
from jobsite.jobs.api.root import api
from jobsite.jobs.models import ApiToken, JobRecord
from jobsite.jobs.permissions import OPERATORS
from tests.engine import tasks as t

from .conftest import make_token, mirror_all, run_worker, staff_user

pytestmark = pytest.mark.django_db(transaction=True)
BASE = "/api/v1"


def call(web: WebClient, method: str, path: str, token: str | None = None, **kw: Any) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return getattr(web, method)(BASE + path, content_type="application/json", **headers, **kw)


def operations() -> list[tuple[str, str]]:
    schema = api.get_openapi_schema()
    out = []
    for path, methods in schema["paths"].items():
        for method in methods:
            concrete = (
                path.replace("/api/v1", "")
                .replace("{job_id}", "x")
                .replace("{name}", "default")
                .replace("{queue}", "default")
                .replace("{schedule}", "x")
                .replace("{flow_id}", "x")
                .replace("{dedup_id}", "some-id")
                .replace("{run_id}", "1")
            )
            out.append((method, concrete))
    return out


def test_every_operation_refuses_anonymous_callers(engine: EngineSettings) -> None:
    web = WebClient()
    ops = operations()
    assert len(ops) >= 13
    for method, path in ops:
        response = call(web, method, path, data="{}" if method != "get" else None)
        assert response.status_code == 401, (method, path, response.status_code)
    assert web.get(f"{BASE}/docs").status_code == 302  # docs: staff only


def test_revoked_or_non_staff_tokens_are_refused(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    assert call(web, "get", "/tasks", token).status_code == 200
    ApiToken.objects.update(revoked_at="2026-01-01T00:00:00Z")
    assert call(web, "get", "/tasks", token).status_code == 401
    assert call(web, "get", "/tasks", "js_wrong").status_code == 401


def test_session_needs_staff_and_csrf(engine: EngineSettings) -> None:
    staff = staff_user("s", OPERATORS)
    plain = User.objects.create_user("p", password="x")
    web = WebClient(enforce_csrf_checks=True)
    web.force_login(plain)
    assert call(web, "get", "/tasks").status_code == 401
    web.force_login(staff)
    assert call(web, "get", "/tasks").status_code == 200
    body = {"task": "add", "args": [1, 2]}
    assert call(web, "post", "/jobs", data=body).status_code in (401, 403)  # no CSRF token
    web.get("/admin/")
    csrf = web.cookies["csrftoken"].value
    ok = call(web, "post", "/jobs", data=body, HTTP_X_CSRFTOKEN=csrf)
    assert ok.status_code == 201, ok.content


def test_job_lifecycle(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    made = call(web, "post", "/jobs", token, data={"task": "add", "args": [2, 3], "priority": 5})
    assert made.status_code == 201 and made.json()["state"] == "submitted"
    job_id = made.json()["id"]
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    got = call(web, "get", f"/jobs/{job_id}", token).json()
    assert got["state"] == "completed" and got["result"] == 5
    assert [h["to_state"] for h in got["history"]] == ["submitted", "started", "completed"]
    page = call(web, "get", "/jobs?state=completed&limit=1", token).json()
    assert [j["id"] for j in page["items"]] == [job_id]
    assert call(web, "post", f"/jobs/{job_id}/retry", token).status_code == 409
    assert call(web, "delete", f"/jobs/{job_id}", token).status_code == 409
    later = call(
        web, "post", "/jobs", token, data={"task": "add", "args": [1, 1], "delay_s": 60}
    ).json()
    gone = call(web, "delete", f"/jobs/{later['id']}", token)
    assert gone.status_code == 202 and gone.json()["outcome"] == "cancelled"
    assert call(web, "post", f"/jobs/{later['id']}/retry", token).json()["state"] == "submitted"
    boom = call(web, "post", "/jobs", token, data={"task": "boom"}).json()
    async_to_sync(run_worker)(engine)
    assert [j["id"] for j in call(web, "get", "/dlq", token).json()] == [boom["id"]]
    assert call(
        web, "post", "/dlq/resubmit", token, data={"queue": "default", "task": "boom"}
    ).json() == {"count": 1}
    [queue] = call(web, "get", "/queues", token).json()
    assert queue["name"] == "default" and queue["counts"]["submitted"] == 1  # the resubmitted boom
    assert call(web, "post", "/queues/default/pause", token).json()["paused"] is True
    assert call(web, "post", "/queues/default/resume", token).json()["paused"] is False
    assert call(web, "post", "/queues/nope/pause", token).status_code == 404
    assert [q["name"] for q in call(web, "get", "/queues", token).json()] == ["default"]
    assert isinstance(call(web, "get", "/stats", token).json(), list)
    assert call(web, "get", "/workers", token).json() == []
    names = {t["name"]: t for t in call(web, "get", "/tasks", token).json()}
    assert names["add"]["arguments"]["required"] == ["a", "b"]


def test_bad_input_never_yields_a_500(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    unknown = call(web, "post", "/jobs", token, data={"task": "no.such"})
    assert unknown.status_code == 422 and "unknown task" in unknown.json()["detail"]
    assert call(web, "post", "/jobs", token, data={"task": "add", "args": [1]}).status_code == 422
    assert (
        call(
            web, "post", "/jobs", token, data={"task": "add", "args": [1], "priority": 500}
        ).status_code
        == 422
    )
    assert call(web, "post", "/jobs", token, data="{not json").status_code in (400, 422)
    big = call(web, "post", "/jobs", token, data={"task": "ctx", "args": ["x" * (2 << 20)]})
    assert big.status_code == 413  # over the engine's max_payload_bytes
    huge = call(web, "post", "/jobs", token, data={"task": "ctx", "args": ["x" * (3 << 20)]})
    assert huge.status_code == 413 and "DATA_UPLOAD_MAX_MEMORY_SIZE" in huge.json()["detail"]
    typed = call(web, "post", "/jobs", token, data={"task": "add", "args": ["<b>x</b>", 1]})
    assert typed.status_code == 422 and "argument 'a'" in typed.json()["detail"]
    nan = call(web, "post", "/jobs", token, data='{"task": "ctx", "args": [NaN]}')
    assert nan.status_code == 400
    assert call(web, "get", "/jobs/nobody", token).status_code == 404
    assert call(web, "delete", "/jobs/nobody", token).status_code == 404
    assert call(web, "get", "/jobs?cursor=%%%", token).status_code == 422
    # NUL characters: PostgreSQL refuses them in text (422 there), SQLite just finds nothing
    assert call(web, "post", "/bulk/cancel", token, data={"ids": ["a\x00b"]}).status_code in (
        200,
        422,
    )
    assert call(web, "get", "/jobs?q=a%00b", token).status_code in (200, 422)


def test_redis_down_is_503_with_retry_after(engine: EngineSettings, token: str) -> None:
    down = {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "TASK_MODULES": conf.task_modules()}
    with override_settings(JOBSITE=down):
        conf.engine_settings.cache_clear()
        response = call(WebClient(), "post", "/jobs", token, data={"task": "add", "args": [1, 2]})
    conf.engine_settings.cache_clear()
    assert response.status_code == 503 and response["Retry-After"] == "1"


def test_only_login_and_static_are_public() -> None:
    public = []
    web = WebClient()
    for pattern in get_resolver().url_patterns:
        route = str(pattern.pattern)
        if "<" in route or route.startswith("^"):
            continue
        status = web.get("/" + route).status_code
        if status == 200:
            public.append(route)
    assert public == []


def test_bulk_actions_by_ids_or_filter(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    ids = [
        call(
            web, "post", "/jobs", token, data={"task": "add", "args": [i, i], "delay_s": 60}
        ).json()["id"]
        for i in range(4)
    ]
    async_to_sync(mirror_all)()
    dry = call(
        web, "post", "/bulk/cancel", token, data={"state": "scheduled", "dry_run": True}
    ).json()
    assert dry == {"matched": 4, "changed": 0, "skipped": {}}
    assert call(web, "get", f"/jobs/{ids[0]}", token).json()["state"] == "scheduled"
    one = call(web, "post", "/bulk/cancel", token, data={"ids": ids[:1]}).json()
    assert one == {"matched": 1, "changed": 1, "skipped": {}}
    async_to_sync(mirror_all)()
    rest = call(
        web, "post", "/bulk/cancel", token, data={"state": "scheduled", "task": "add"}
    ).json()
    assert rest == {"matched": 3, "changed": 3, "skipped": {}}
    async_to_sync(mirror_all)()
    again = call(web, "post", "/bulk/retry", token, data={"state": "cancelled"}).json()
    assert again == {"matched": 4, "changed": 4, "skipped": {}}


def test_cursor_pagination_walks_the_whole_history(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    made = {
        call(web, "post", "/jobs", token, data={"task": "add", "args": [i, 1]}).json()["id"]
        for i in range(7)
    }
    async_to_sync(mirror_all)()
    seen: list[str] = []
    cursor = ""
    while True:
        page = call(
            web, "get", f"/jobs?limit=3{'&cursor=' + cursor if cursor else ''}", token
        ).json()
        seen += [j["id"] for j in page["items"]]
        if not page["next_cursor"]:
            break
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen)) == 7 and set(seen) == made


@pytest.mark.parametrize(
    "body",
    [
        "[null, null]",
        "[]",
        "{}",
        '{"dry_run": true}',
        '{"ids": []}',
        '{"state": ""}',
        '{"state": "scheduled", "bogus": 1}',
        '"all"',
        "null",
        '{"ids": ["../queues/default/pause"]}',
    ],
)
def test_bulk_needs_an_explicit_selector(engine: EngineSettings, token: str, body: str) -> None:
    web = WebClient()
    services.enqueue(t.add.using(delay_s=60), 1, 1)
    async_to_sync(mirror_all)()
    response = call(web, "post", "/bulk/cancel", token, data=body)
    assert response.status_code in (400, 422), (body, response.status_code, response.content)
    assert JobRecord.objects.get().state == "scheduled"  # nothing was cancelled


def test_bulk_past_the_cap_runs_in_the_background_and_is_audited(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    ids = [services.enqueue(t.add.using(delay_s=60), i, i).id for i in range(3)]
    async_to_sync(mirror_all)()
    with override_settings(JOBSITE={**settings.JOBSITE, "BULK_MAX": 2}):
        by_ids = call(web, "post", "/bulk/cancel", token, data={"ids": ids[:2]})
        assert by_ids.json() == {"matched": 2, "changed": 2, "skipped": {}}
    per_job = LogEntry.objects.filter(object_id__in=ids[:2])
    assert per_job.count() == 2
    assert all("cancel via API token 'robot-token'" in e.change_message for e in per_job)
    async_to_sync(mirror_all)()
    rest = call(web, "post", "/bulk/cancel", token, data={"all": True})
    assert rest.json() == {"matched": 1, "changed": 1, "skipped": {}}
    [summary] = LogEntry.objects.filter(object_id__isnull=True)
    assert "1 jobs matching {}" in summary.change_message
    # Past the cap: 7 jobs, 2 a request, so the rest go in the background, in id order.
    more = [services.enqueue(t.add.using(delay_s=60), i, i).id for i in range(7)]
    async_to_sync(mirror_all)()
    with override_settings(JOBSITE={**settings.JOBSITE, "BULK_MAX": 2}):
        dry = call(web, "post", "/bulk/cancel", token, data={"all": True, "dry_run": True})
        assert dry.json() == {"matched": 7, "changed": 0, "skipped": {}}
        began = call(web, "post", "/bulk/cancel", token, data={"state": "scheduled"})
    assert began.status_code == 202, began.content
    run = began.json()
    assert (run["action"], run["matched"], run["selector"]) == ("cancel", 7, {"state": "scheduled"})
    deadline = time.monotonic() + 30
    while (run := call(web, "get", f"/bulk/runs/{run['id']}", token).json())["state"] == "running":
        assert time.monotonic() < deadline, run
        time.sleep(0.05)
    assert (run["state"], run["looked_at"], run["changed"], run["skipped"]) == ("done", 7, 7, {})
    engine_states = async_to_sync(services.ajob_fields)("default", more, ["state"])
    assert {found["state"] for found in engine_states} == {"cancelled"}
    assert LogEntry.objects.filter(change_message__contains="7 jobs matching").count() == 1
    assert call(web, "get", "/bulk/runs/999999", token).status_code == 404


def test_ids_past_a_smaller_cap_change_in_the_request_and_only_they(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    ids = [services.enqueue(t.add.using(delay_s=60), i, i).id for i in range(3)]
    async_to_sync(mirror_all)()
    with override_settings(JOBSITE={**settings.JOBSITE, "BULK_MAX": 1}):
        done = call(web, "post", "/bulk/cancel", token, data={"ids": ids[:2]})
    assert done.status_code == 200, done.content
    assert done.json() == {"matched": 2, "changed": 2, "skipped": {}}
    found = async_to_sync(services.ajob_fields)("default", ids, ["state"])
    assert [f["state"] for f in found] == ["cancelled", "cancelled", "scheduled"]


def test_a_bulk_run_is_hidden_from_a_token_of_another_queue(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    for i in range(3):
        services.enqueue(t.add.using(delay_s=60), i, i)
    async_to_sync(mirror_all)()
    with override_settings(JOBSITE={**settings.JOBSITE, "BULK_MAX": 1}):
        began = call(web, "post", "/bulk/cancel", token, data={"queue": "default"})
    assert began.status_code == 202, began.content
    narrowed = make_token(User.objects.get(username="robot"), queues=["other"])
    run_id = began.json()["id"]
    assert call(web, "get", f"/bulk/runs/{run_id}", narrowed).status_code in (403, 404)
    deadline = time.monotonic() + 30  # the run ends before the test's database goes
    while call(web, "get", f"/bulk/runs/{run_id}", token).json()["state"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_every_api_action_is_audited(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    made = call(web, "post", "/jobs", token, data={"task": "add", "args": [1, 1], "delay_s": 60})
    job_id = made.json()["id"]
    call(web, "delete", f"/jobs/{job_id}", token)
    call(web, "post", f"/jobs/{job_id}/retry", token)
    call(web, "post", "/queues/default/pause", token)
    call(web, "post", "/queues/nope/pause", token)  # 404: nothing done, nothing logged
    messages = list(LogEntry.objects.order_by("pk").values_list("object_id", "change_message"))
    assert [(o, m.split(" via ")[0]) for o, m in messages] == [
        (job_id, "submit"),
        (job_id, "cancel"),
        (job_id, "retry"),
        ("default", "pause"),
    ]


def test_queues_are_the_configured_ones(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    body = {"task": "add", "args": [1, 1], "queue": "typo"}
    refused = call(web, "post", "/jobs", token, data=body)
    assert refused.status_code == 422 and "JOBSITE['QUEUES']" in refused.json()["detail"]
    with override_settings(JOBSITE={**settings.JOBSITE, "ANY_QUEUE": True}):
        assert call(web, "post", "/jobs", token, data=body).status_code == 201


def test_job_detail_returns_the_log_lines_to_viewers_of_its_queue(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    made = call(web, "post", "/jobs", token, data={"task": "logging_async", "args": [3]})
    job_id = made.json()["id"]
    async_to_sync(run_worker)(dataclasses.replace(engine, job_log_max_lines=2))
    want = ["line 1 of attempt 1", "line 2 of attempt 1"]
    live = call(web, "get", f"/jobs/{job_id}", token).json()  # from Redis
    assert [x["message"] for x in live["logs"]] == want and live["logs_dropped"] == 1
    assert all(x["attempt"] == 1 and x["at_ms"] > 0 for x in live["logs"])
    async_to_sync(mirror_all)()
    assert services.purge([(job_id, "default")]) == 1
    kept = call(web, "get", f"/jobs/{job_id}", token).json()  # from the history
    assert kept["logs"] == live["logs"] and kept["logs_dropped"] == 1
    assert "logs" not in call(web, "get", "/jobs", token).json()["items"][0]  # detail only
    elsewhere = make_token(User.objects.get(username="robot"), queues=["billing"])
    refused = call(web, "get", f"/jobs/{job_id}", elsewhere)
    assert refused.status_code == 403 and "logs" not in refused.json()


def test_job_list_sorts_pages_counts_and_finds_part_of_a_task_name(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    for i in range(5):
        services.enqueue(t.add, i, 1)
    services.enqueue(t.boom)
    async_to_sync(run_worker)(services.engine_settings())
    waiting = services.enqueue(t.add.using(delay_s=600), 9, 9)
    async_to_sync(mirror_all)()
    counts = call(web, "get", "/job-counts", token).json()
    assert counts == {"total": 7, "states": {"completed": 5, "failed": 1, "scheduled": 1}}
    assert call(web, "get", "/job-counts?task_like=BO", token).json()["total"] == 1
    found = call(web, "get", "/jobs?task_like=dd", token).json()["items"]
    assert {j["task"] for j in found} == {"add"} and len(found) == 6
    # every order pages the whole set once, in order; started/finished list jobs that have one
    for sort, field, want in [
        ("-submitted_at", "submitted_at", 7),
        ("submitted_at", "submitted_at", 7),
        ("-completed_at", "completed_at", 6),
        ("started_at", "started_at", 6),
    ]:
        seen: list[dict[str, Any]] = []
        cursor = ""
        while True:
            query = f"/jobs?limit=2&sort={sort}{'&cursor=' + cursor if cursor else ''}"
            page = call(web, "get", query, token).json()
            seen += page["items"]
            if not page["next_cursor"]:
                break
            cursor = page["next_cursor"]
        ids = [j["id"] for j in seen]
        assert len(ids) == len(set(ids)) == want, (sort, ids)
        # As times: an ISO text drops a zero fraction (":04Z" is before ":04.005Z").
        stamps = [datetime.fromisoformat(j[field]) for j in seen]
        assert stamps == sorted(stamps, reverse=sort.startswith("-")), (sort, stamps)
        if sort == "-completed_at":
            assert waiting.id not in ids
    # a cursor belongs to its order
    first = call(web, "get", "/jobs?limit=2", token).json()
    other = call(web, "get", f"/jobs?sort=started_at&cursor={first['next_cursor']}", token)
    assert other.status_code == 422 and "pages the order" in other.json()["detail"]
    assert call(web, "get", "/jobs?sort=id", token).status_code == 422
    # a dead-letter group's jobs
    failed = JobRecord.objects.get(task="boom")
    assert failed.fingerprint
    group = call(web, "get", f"/jobs?fingerprint={failed.fingerprint}", token).json()["items"]
    assert [j["id"] for j in group] == [failed.id]
    counted = call(web, "get", f"/job-counts?fingerprint={failed.fingerprint}", token).json()
    assert counted == {"total": 1, "states": {"failed": 1}}


def test_bulk_says_what_it_skipped_and_why(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    done = services.enqueue(t.add, 1, 1)
    async_to_sync(run_worker)(services.engine_settings())
    later = services.enqueue(t.add.using(delay_s=600), 2, 2)
    async_to_sync(mirror_all)()
    answer = call(web, "post", "/bulk/cancel", token, data={"ids": [done.id, later.id]}).json()
    assert answer == {
        "matched": 1,
        "changed": 1,
        "skipped": {"not cancellable (state or permission)": 1},
    }


def test_a_job_says_when_and_how_it_ended_and_a_cancel_answers_with_the_job(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    boom = call(web, "post", "/jobs", token, data={"task": "boom", "max_retries": 0}).json()
    done = call(web, "post", "/jobs", token, data={"task": "add", "args": [1, 2]}).json()
    async_to_sync(run_worker)(engine)
    failed = call(web, "get", f"/jobs/{boom['id']}", token).json()
    assert failed["state"] == "failed" and failed["failed_at"] == failed["completed_at"]
    assert failed["error"] == "unexpected" and failed["max_retries"] == 0
    assert failed["cancelled_at"] is None and failed["duration_seconds"] >= 0
    assert failed["claimed_at"] is not None and failed["claimed_at"] <= failed["started_at"]
    ok = call(web, "get", f"/jobs/{done['id']}", token).json()
    assert ok["failed_at"] is None and ok["error"] is None
    assert ok["max_retries"] == t.add.options.max_retries  # the task's own, from the registry
    later = call(web, "post", "/jobs", token, data={"task": "add", "args": [1, 1], "delay_s": 60})
    gone = call(web, "delete", f"/jobs/{later.json()['id']}", token)
    body = gone.json()
    assert gone.status_code == 202 and body["outcome"] == "cancelled"
    assert body["state"] == "cancelled" and body["cancelled_at"] is not None
    assert body["id"] == later.json()["id"] and body["failed_at"] is None


def test_the_dlq_filters_by_task_and_version_and_purges_by_ids(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    booms = [
        call(web, "post", "/jobs", token, data={"task": "boom", "max_retries": 0}).json()
        for _ in range(3)
    ]
    other = call(web, "post", "/jobs", token, data={"task": "explicit_err"}).json()
    async_to_sync(run_worker)(engine)
    listed = [j["id"] for j in call(web, "get", "/dlq?task=boom&version=1", token).json()]
    assert sorted(listed) == sorted(b["id"] for b in booms)  # in the order they failed
    assert call(web, "get", "/dlq?task=boom&version=2", token).json() == []
    paged = call(web, "get", "/dlq?task=boom&limit=2&offset=1", token).json()
    assert [j["id"] for j in paged] == listed[1:3]
    assert [j["id"] for j in call(web, "get", "/dlq?task=explicit_err", token).json()] == [
        other["id"]
    ]
    gone = call(
        web,
        "post",
        "/dlq/purge",
        token,
        data={"queue": "default", "ids": [booms[0]["id"], "never-dead"]},
    )
    assert gone.json() == {"count": 1}
    left = {j["id"] for j in call(web, "get", "/dlq", token).json()}
    assert booms[0]["id"] not in left and booms[1]["id"] in left


def test_cleanup_on_from_the_api_drops_completed_jobs_and_refuses_bad_states(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    bad = call(web, "post", "/jobs", token, data={"task": "add", "cleanup_on": {"done": 1}})
    assert bad.status_code == 422 and "cleanup_on" in bad.content.decode()
    negative = {"task": "add", "cleanup_on": {"failed": -1}}
    assert call(web, "post", "/jobs", token, data=negative).status_code == 422
    body = {"task": "add", "args": [1, 2], "cleanup_on": {"completed": 0, "failed": 60}}
    job = call(web, "post", "/jobs", token, data=body).json()
    async_to_sync(run_worker)(engine)
    assert call(web, "get", f"/jobs/{job['id']}", token).status_code == 404  # gone from Redis
    async_to_sync(mirror_all)()
    row = call(web, "get", f"/jobs/{job['id']}", token).json()
    assert row["state"] == "completed"  # the history row, written from the event


def test_a_repeating_job_from_the_api_is_a_schedule_with_a_limit(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    body = {"task": "add", "args": [1, 2], "repeat_every_s": 3600, "repeat_limit": 4}
    made = call(web, "post", "/jobs", token, data=body)
    assert made.status_code == 201, made.content
    job = made.json()
    name, _, at_ms = job["id"].partition("@")
    assert job["state"] == "scheduled" and at_ms.isdigit()
    [schedule] = call(web, "get", "/schedules", token).json()
    assert (schedule["name"], schedule["every_s"], schedule["repeat_limit"]) == (name, 3600, 4)
    assert (schedule["fired"], schedule["remaining"], len(schedule["next_runs"])) == (0, 4, 4)
    bad = {"task": "add", "args": [1, 2], "repeat_limit": 4}
    assert call(web, "post", "/jobs", token, data=bad).status_code == 422


def test_worker_timeout_and_queue_timeout_are_jobsite_settings(engine: EngineSettings) -> None:
    jobsite = {
        **settings.JOBSITE,
        "WORKER_TIMEOUT": 3600,
        "QUEUE_TIMEOUT": 7200,
        "QUEUE_TIMEOUTS": {"reports": {"WORKER_TIMEOUT": 600}},
    }
    with override_settings(JOBSITE=jobsite):
        made = conf.engine_settings()
        assert (made.worker_timeout_s, made.queue_timeout_s) == (3600, 7200)
        assert made.worker_timeout_for("reports") == 600
        assert made.queue_timeout_for("reports") == 7200
    bad = {**jobsite, "QUEUE_TIMEOUTS": {"reports": {"TIMEOUT": 5}}}
    with override_settings(JOBSITE=bad), pytest.raises(ConfigError, match="unknown keys"):
        conf.engine_settings()
    with override_settings(JOBSITE={**jobsite, "WORKER_TIMEOUT": -5}), pytest.raises(ConfigError):
        conf.engine_settings()


def test_a_claimed_job_that_has_not_begun_shows_its_phase(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    job = call(web, "post", "/jobs", token, data={"task": "add", "args": [1, 2]}).json()
    assert job["phase"] is None  # submitted

    async def claim(client: EngineClient) -> str:
        options = {"events_maxlen": 1000, "lease_ms": 60_000, "result_ttl_ms": 60_000}
        [row] = await client.scripts.claim(
            client.keys("default"), max_jobs=1, worker_id="w", **options
        )
        return row.token

    async def begin(client: EngineClient, token_: str) -> None:
        keys = client.keys("default")
        await client.scripts.begin(keys, lease_ms=60_000, jobs=[BeginJob(job["id"], token_, False)])

    lease = services.run_engine(claim)
    claimed = call(web, "get", f"/jobs/{job['id']}", token).json()
    assert (claimed["state"], claimed["phase"]) == ("started", "claimed")
    assert claimed["claimed_at"] is not None and claimed["started_at"] is None
    services.run_engine(lambda c: begin(c, lease))
    running = call(web, "get", f"/jobs/{job['id']}", token).json()
    assert (running["phase"], running["started_at"] is not None) == ("running", True)
