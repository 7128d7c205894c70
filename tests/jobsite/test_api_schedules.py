"""Schedules through the API: every operation, its validation errors, declared ones, the client."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.contrib.admin.models import DELETION, LogEntry
from django.test import Client as WebClient
from django.test import override_settings

from demo.asgi import application as asgi_app
from demo.wsgi import application as wsgi_app
from engine import Client, EngineSettings
from engine.periodic.scheduler import Scheduler
from jobsite.client import AsyncJobsiteClient, Conflict, InvalidRequest, JobsiteClient, NotFound
from jobsite.jobs import services
from jobsite.jobs.models import JobRecord
from jobsite.jobs.permissions import OPERATORS, VIEWERS
from jobsite.jobs.tasks import schedules

from .conftest import make_token, mirror_all, run_worker, staff_user

pytestmark = pytest.mark.django_db(transaction=True)
BASE = "/api/v1"
EVERY = {"name": "often", "task": "add", "args": [1, 2], "every_s": 60}


def call(web: WebClient, method: str, path: str, token: str, body: Any = None) -> Any:
    kwargs = {} if body is None else {"data": body}
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    return getattr(web, method)(BASE + path, content_type="application/json", **headers, **kwargs)


def ms(at: str) -> int:
    return int(datetime.fromisoformat(at).timestamp() * 1000)


def test_create_and_list(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    made = call(web, "post", "/schedules", token, EVERY)
    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["name"], body["queue"], body["task"], body["args"]) == (
        "often",
        "default",
        "add",
        [1, 2],
    )
    assert (body["origin"], body["overridden"], body["paused"]) == ("runtime", False, False)
    gaps = {ms(b) - ms(a) for a, b in zip(body["next_runs"], body["next_runs"][1:], strict=False)}
    assert len(body["next_runs"]) == 5 and gaps == {60_000}
    assert body["last_run"] is None

    nightly = {
        "name": "nightly",
        "task": "add",
        "kwargs": {"a": 1, "b": 1},
        "cron": "0 3 * * *",
        "tz": "Europe/Paris",
    }
    assert call(web, "post", "/schedules", token, nightly).status_code == 201
    listed = call(web, "get", "/schedules", token).json()
    assert [s["name"] for s in listed] == ["nightly", "often"]
    cron_runs = [datetime.fromisoformat(t) for t in listed[0]["next_runs"]]
    assert len(cron_runs) == 5
    assert {(t.hour, t.minute) for t in cron_runs} <= {(1, 0), (2, 0)}  # 03:00 Paris in UTC

    again = call(web, "post", "/schedules", token, EVERY)
    assert (
        again.status_code == 409
        and "already has a schedule named 'often'" in again.json()["detail"]
    )


def test_edit_pause_resume_delete_each_audited(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    assert call(web, "post", "/schedules", token, EVERY).status_code == 201
    edited = call(
        web,
        "put",
        "/schedules/default/often",
        token,
        {"task": "add", "args": [5, 5], "cron": "*/5 * * * *"},
    )
    assert edited.status_code == 200, edited.content
    assert (edited.json()["cron"], edited.json()["every_s"], edited.json()["args"]) == (
        "*/5 * * * *",
        None,
        [5, 5],
    )
    assert all(datetime.fromisoformat(t).minute % 5 == 0 for t in edited.json()["next_runs"])

    paused = call(web, "post", "/schedules/default/often/pause", token)
    assert (
        paused.status_code == 200 and paused.json()["paused"] and paused.json()["next_runs"] == []
    )
    # an edit keeps it paused unless it says otherwise
    kept = call(
        web,
        "put",
        "/schedules/default/often",
        token,
        {"task": "add", "args": [6, 6], "every_s": 30},
    )
    assert kept.json()["paused"] is True
    resumed = call(web, "post", "/schedules/default/often/resume", token)
    assert not resumed.json()["paused"] and len(resumed.json()["next_runs"]) == 5
    assert call(web, "get", "/schedules/default/often", token).json()["args"] == [6, 6]

    assert call(web, "delete", "/schedules/default/often", token).status_code == 204
    assert call(web, "get", "/schedules/default/often", token).status_code == 404
    assert call(web, "delete", "/schedules/default/often", token).status_code == 404
    assert call(web, "get", "/schedules", token).json() == []
    actions = list(
        LogEntry.objects.filter(object_id="default/often")
        .order_by("id")
        .values_list("change_message", flat=True)
    )
    assert [a.split(" via ")[0] for a in actions] == [
        "create",
        "edit",
        "pause",
        "edit",
        "resume",
        "delete",
    ]
    assert (
        LogEntry.objects.get(
            object_id="default/often", change_message__startswith="delete"
        ).action_flag
        == DELETION
    )


def test_run_now_fires_a_job_seen_as_the_last_run(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    call(web, "post", "/schedules", token, {**EVERY, "paused": True})
    run = call(web, "post", "/schedules/default/often/run", token)
    assert run.status_code == 201, run.content
    job_id = run.json()["id"]
    assert job_id.startswith("often@") and job_id.endswith("m")
    last = call(web, "get", "/schedules/default/often", token).json()["last_run"]
    assert (last["id"], last["state"], last["manual"]) == (job_id, "submitted", True)
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    last = call(web, "get", "/schedules/default/often", token).json()["last_run"]
    assert (last["id"], last["state"]) == (job_id, "completed")
    assert call(web, "get", f"/jobs/{job_id}", token).json()["result"] == 3
    audited = LogEntry.objects.filter(object_id="default/often").values_list(
        "change_message", flat=True
    )
    assert f"run via API token 'robot-token': {job_id}" in audited
    assert LogEntry.objects.filter(object_id=job_id, change_message__startswith="submit").exists()
    # a second run is a new job
    second = call(web, "post", "/schedules/default/often/run", token).json()["id"]
    assert second != job_id
    assert call(web, "post", "/schedules/default/nobody/run", token).status_code == 404

    # Redis forgets (emptied): the last run comes from the history, by the id's prefix
    async def forget(client: Client) -> None:
        await client.redis.delete(client.keys("default").repeat_last)

    services.run_engine(forget)
    last = call(web, "get", "/schedules/default/often", token).json()["last_run"]
    assert (last["id"], last["state"]) == (job_id, "completed")  # the second was never mirrored


def test_a_tick_is_the_last_run(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    call(web, "post", "/schedules", token, {**EVERY, "every_s": 0.2})

    async def fire(client: Client) -> float:
        await asyncio.sleep(0.3)
        return await Scheduler(client.settings, client.redis, ["default"]).tick()

    services.run_engine(fire)
    last = call(web, "get", "/schedules/default/often", token).json()["last_run"]
    assert last is not None and not last["manual"] and last["state"] == "submitted"
    assert last["id"].startswith("often@") and last["id"][len("often@") :].isdigit()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"task": "nope"}, "unknown task 'nope'"),
        ({"cron": "61 * * * *", "every_s": None}, "invalid cron expression"),
        ({"cron": "0 3 * * *", "every_s": None, "tz": "Mars/Base"}, "unknown time zone"),
        ({"cron": "0 3 * * *"}, "exactly one of every_s and cron"),
        ({"every_s": None}, "exactly one of every_s and cron"),
        ({"args": [1]}, "missing a required argument"),
        ({"args": ["1", 2]}, "argument 'a'"),
        ({"args": [1, 2], "kwargs": {"c": 3}}, "unexpected keyword argument"),
        ({"name": "no spaces"}, "names are 1-113"),
        ({"queue": "reports"}, "not one of JOBSITE['QUEUES']"),
        ({"start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}, "end_at"),
    ],
)
def test_bad_input_is_a_422_that_names_the_problem(
    engine: EngineSettings, token: str, change: dict[str, Any], message: str
) -> None:
    web = WebClient()
    response = call(web, "post", "/schedules", token, {**EVERY, **change})
    assert response.status_code == 422, response.content
    assert message in str(response.json()["detail"]), response.json()
    assert call(web, "get", "/schedules", token).json() == []  # nothing stored


@pytest.mark.parametrize("extra", [{"job_id": "mine"}, {"every": 5}, {"kwargs": {}, "priorty": 1}])
def test_unknown_keys_in_a_schedule_body_are_a_422_naming_them(
    engine: EngineSettings, token: str, extra: dict[str, Any]
) -> None:
    web = WebClient()
    unknown = sorted(set(extra) - {"kwargs"})
    made = call(web, "post", "/schedules", token, {**EVERY, **extra})
    assert made.status_code == 422, made.content
    assert [e["loc"][-1] for e in made.json()["detail"]] == unknown
    assert all(e["type"] == "extra_forbidden" for e in made.json()["detail"])
    assert call(web, "get", "/schedules", token).json() == []  # nothing stored
    before = call(web, "post", "/schedules", token, EVERY).json()
    body = {"task": "add", "args": [1, 2], "every_s": 5, **extra}
    edited = call(web, "put", "/schedules/default/often", token, body)
    assert edited.status_code == 422, edited.content
    assert [e["loc"][-1] for e in edited.json()["detail"]] == unknown
    assert call(web, "get", "/schedules/default/often", token).json() == before


def test_bad_edits_change_nothing(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    before = call(web, "post", "/schedules", token, EVERY).json()
    bad = call(
        web,
        "put",
        "/schedules/default/often",
        token,
        {"task": "add", "args": [1, 2], "cron": "nope"},
    )
    assert bad.status_code == 422 and "invalid cron" in bad.json()["detail"]
    assert call(web, "get", "/schedules/default/often", token).json() == before
    for method, path in [
        ("put", "/schedules/default/nobody"),
        ("post", "/schedules/default/nobody/pause"),
        ("post", "/schedules/default/nobody/resume"),
        ("get", "/schedules/default/nobody"),
        ("get", "/schedules/bad queue!/often"),
    ]:
        body = {"task": "add", "args": [1, 2], "every_s": 5} if method == "put" else None
        assert call(web, method, path, token, body).status_code == 404, (method, path)
    assert call(web, "post", "/schedules", token, {**EVERY, "every_s": -1}).status_code == 422


def test_a_declared_schedule_shows_as_settings_and_an_edit_overrides_it(
    engine: EngineSettings, token: str
) -> None:
    from django.conf import settings

    entry = {"name": "declared", "task": "add", "args": [1, 2], "every_s": 3600}
    with override_settings(JOBSITE={**settings.JOBSITE, "SCHEDULES": [entry]}):
        async_to_sync(schedules.sync)(schedules.declared())
        web = WebClient()
        shown = call(web, "get", "/schedules/default/declared", token).json()
        assert (shown["origin"], shown["overridden"]) == ("settings", False)
        edited = call(
            web,
            "put",
            "/schedules/default/declared",
            token,
            {"task": "add", "args": [2, 2], "every_s": 60},
        )
        assert (edited.json()["origin"], edited.json()["overridden"]) == ("settings", True)
        report = async_to_sync(schedules.sync)(schedules.declared())  # runworker's sync
        assert report.kept_overrides == 1
        kept = call(web, "get", "/schedules/default/declared", token).json()
        assert (kept["every_s"], kept["args"], kept["overridden"]) == (60, [2, 2], True)
        paused = call(web, "post", "/schedules/default/declared/pause", token).json()
        assert paused["overridden"] and paused["origin"] == "settings"


def test_views_and_token_scopes(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    call(web, "post", "/schedules", token, EVERY)
    viewer = make_token(staff_user("viewer", VIEWERS))
    assert call(web, "get", "/schedules", viewer).status_code == 200
    denied = call(web, "post", "/schedules/default/often/pause", viewer)
    assert denied.status_code == 403 and "jobsite.change_queuerecord" in denied.json()["detail"]
    elsewhere = make_token(staff_user("elsewhere", OPERATORS), queues=["other"])
    assert call(web, "get", "/schedules", elsewhere).json() == []
    assert call(web, "get", "/schedules/default/often", elsewhere).status_code == 403
    assert call(web, "post", "/schedules", elsewhere, EVERY | {"name": "x"}).status_code == 403
    narrow = make_token(staff_user("narrow", OPERATORS), permissions=["view_jobrecord"])
    assert call(web, "delete", "/schedules/default/often", narrow).status_code == 403
    assert call(web, "get", "/schedules/default/often", token).status_code == 200


def test_the_client_covers_every_operation(engine: EngineSettings, token: str) -> None:
    api = JobsiteClient("http://testserver", token, transport=httpx.WSGITransport(app=wsgi_app))
    with api:
        made = api.create_schedule("often", "add", 1, 2, every_s=60)
        assert made["name"] == "often" and len(made["next_runs"]) == 5
        with pytest.raises(Conflict):
            api.create_schedule("often", "add", 1, 2, every_s=60)
        with pytest.raises(InvalidRequest, match="invalid cron"):
            api.create_schedule("bad", "add", 1, 2, cron="nope")
        assert (
            api.edit_schedule("default", "often", "add", 3, 4, cron="0 * * * *")["cron"]
            == "0 * * * *"
        )
        assert api.pause_schedule("default", "often")["paused"]
        assert not api.resume_schedule("default", "often")["paused"]
        run = api.run_schedule("default", "often")
        assert api.schedule("default", "often")["last_run"]["id"] == run["id"]
        assert [s["name"] for s in api.schedules()] == ["often"]
        api.delete_schedule("default", "often")
        with pytest.raises(NotFound):
            api.schedule("default", "often")

    async def go() -> list[Any]:
        transport = httpx.ASGITransport(app=asgi_app)
        async with AsyncJobsiteClient("http://testserver", token, transport=transport) as client:
            await client.create_schedule("async", "add", a=1, b=2, every_s=5, paused=True)
            await client.edit_schedule("default", "async", "add", 2, 2, every_s=10)
            await client.pause_schedule("default", "async")
            await client.resume_schedule("default", "async")
            ran = await client.run_schedule("default", "async")
            listed = await client.schedules(queue="default")
            await client.delete_schedule("default", "async")
            return [ran, listed, await client.schedules()]

    ran, listed, after = async_to_sync(go)()
    assert listed[0]["last_run"]["id"] == ran["id"] and listed[0]["every_s"] == 10
    assert after == []
    assert JobRecord.objects.count() == 0  # nothing mirrored: a plain check the test ran alone


def test_fire_times_past_year_9999_are_left_out(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    late = {**EVERY, "every_s": 31_536_000, "start_at": "9999-06-01T00:00:00Z"}
    made = call(web, "post", "/schedules", token, late)
    assert made.status_code == 201, made.content
    assert made.json()["next_runs"] == ["9999-06-01T00:00:00Z"]
    assert call(web, "post", "/schedules", token, {**late, "every_s": 1e-9}).status_code == 422


def test_a_flow_schedule_with_a_repeat_limit_fires_whole_flows_then_ends(
    engine: EngineSettings, token: str
) -> None:
    api = JobsiteClient("http://testserver", token, transport=httpx.WSGITransport(app=wsgi_app))
    jobs = [
        {"ref": "extract", "task": "add", "args": [1, 1]},
        {"ref": "load", "task": "add", "args": [2, 2], "depends_on": ["extract"]},
    ]
    with api:
        # Two jobs a tick: at least twice the least interval (0.05 s a job) apart.
        made = api.create_flow_schedule("etl", jobs, every_s=0.1, repeat_limit=2)
        assert made["repeat_limit"] == 2 and made["fired"] == 0 and made["remaining"] == 2
        assert made["flow"] == [
            {"task": "add", "args": [1, 1], "kwargs": {}, "parents": []},
            {"task": "add", "args": [2, 2], "kwargs": {}, "parents": [0]},
        ]
        assert len(made["next_runs"]) == 2  # no more fire times than ticks left

        async def fire(client: Client) -> None:
            scheduler = Scheduler(client.settings, client.redis, ["default"])
            for _ in range(10):
                await asyncio.sleep(0.11)
                await scheduler.tick()

        services.run_engine(fire)
        after = api.schedule("default", "etl")
        assert (after["fired"], after["remaining"], after["next_runs"]) == (2, 0, [])
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    ids = sorted(JobRecord.objects.filter(id__startswith="etl@").values_list("id", flat=True))
    assert len(ids) == 4 and sum(1 for i in ids if i.endswith(".1")) == 2
    child = JobRecord.objects.get(id=ids[1])
    assert child.state == "completed" and child.flow_id == ids[0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"flow": {"jobs": [{"ref": "a", "task": "add", "args": [1, 1]}]}}, "not both"),
        ({"task": None}, "give a task"),
        (
            {"task": None, "flow": {"jobs": [{"ref": "a", "task": "add", "args": [1]}]}},
            "missing a required argument",
        ),
        (
            {
                "task": None,
                "flow": {
                    "jobs": [
                        {"ref": "a", "task": "add", "args": [1, 1], "depends_on": ["b"]},
                        {"ref": "b", "task": "add", "args": [1, 1], "depends_on": ["a"]},
                    ]
                },
            },
            "cycle",
        ),
        (
            {
                "task": None,
                "flow": {
                    "jobs": [{"ref": "a", "task": "add", "args": [1, 1], "depends_on": ["x"]}]
                },
            },
            "only on jobs of the flow",
        ),
        ({"repeat_limit": 0}, "repeat_limit"),
    ],
)
def test_bad_flow_schedules_are_a_422_and_store_nothing(
    engine: EngineSettings, token: str, body: dict[str, Any], message: str
) -> None:
    web = WebClient()
    response = call(web, "post", "/schedules", token, {**EVERY, **body})
    assert response.status_code == 422, response.content
    assert message in str(response.json()["detail"]), response.json()
    assert call(web, "get", "/schedules", token).json() == []
