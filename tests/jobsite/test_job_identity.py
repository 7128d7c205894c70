"""One job, one identity: a token narrowed to one queue can never reach another queue's job by
choosing its id, before or after that job exists, nor take a schedule tick's id ahead; every
operation of the API narrows to the token's queues; schedules and bodies are checked strictly.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.test import Client as WebClient
from django.test import override_settings

from engine import EngineSettings, Job, JobIdTaken, Worker
from engine.keys import id_owner_key
from jobsite.jobs import conf, services
from jobsite.jobs.history.mirror import Mirror
from jobsite.jobs.models import JobRecord
from jobsite.jobs.permissions import OPERATORS, VIEWERS
from jobsite.jobs.services import roles
from jobsite.jobs.tasks.registry import load_tasks
from tests.engine import tasks as t

from .conftest import MODULES, make_token, staff_user
from .test_permissions import api_table, make_jobs

pytestmark = pytest.mark.django_db(transaction=True)
QUEUES = ["default", "billing"]


@pytest.fixture
def two_queues(engine: EngineSettings) -> Iterator[EngineSettings]:
    """JOBSITE["QUEUES"] = default and billing (a token scoped to billing), schedules' least
    interval the default one."""
    from django.conf import settings

    values = {k: v for k, v in settings.JOBSITE.items() if k != "MIN_REPEAT_INTERVAL_S"}
    with override_settings(JOBSITE={**values, "QUEUES": QUEUES}):
        conf.engine_settings.cache_clear()
        yield conf.engine_settings()
    conf.engine_settings.cache_clear()


def api(method: str, path: str, key: str, body: Any = None) -> Any:
    kwargs: dict[str, Any] = {"content_type": "application/json"}
    if body is not None:
        kwargs["data"] = body if isinstance(body, str) else json.dumps(body)
    return getattr(WebClient(), method)(
        "/api/v1" + path, HTTP_AUTHORIZATION=f"Bearer {key}", **kwargs
    )


async def _mirror(queues: list[str]) -> None:
    mirror = Mirror(queues, consumer="mirror-identity")
    try:
        await mirror.start()
        while await mirror.step(block_ms=50):
            pass
    finally:
        await mirror.aclose()


def mirror() -> None:
    async_to_sync(_mirror)(QUEUES)


def billing_operator() -> str:
    return make_token(staff_user("billing-op", OPERATORS), queues=["billing"])


def attack(key: str, job_id: str) -> Any:
    return api(
        "post", "/jobs", key, {"task": "add", "args": [6, 6], "queue": "billing", "job_id": job_id}
    )


def test_an_id_of_another_queue_is_refused_after_its_job_exists(two_queues: EngineSettings) -> None:
    victim = services.enqueue(t.add.using(delay_s=600), 1, 2)  # an id the engine made
    chosen = services.enqueue(t.add.using(delay_s=600, job_id="invoice-7"), 3, 4)
    mirror()
    key = billing_operator()
    for job_id in (victim.id, chosen.id):
        refused = attack(key, job_id)
        assert refused.status_code == 409, refused.content
        assert (
            refused.json()["detail"] == f"job ids are taken: {job_id}"
            and "default" not in refused.content.decode()
        )
        # The token still cannot read it, and the real job is untouched in its queue.
        assert api("get", f"/jobs/{job_id}", key).status_code == 403
    mirror()
    rows = {r.id: r for r in JobRecord.objects.filter(id__in=[victim.id, chosen.id])}
    assert {r.queue for r in rows.values()} == {"default"}
    assert rows["invoice-7"].args == [3, 4] and rows[victim.id].args == [1, 2]
    mine = make_token(staff_user("default-op", OPERATORS), queues=["default"])
    listed = {j["id"] for j in api("get", "/jobs?queue=default", mine).json()["items"]}
    assert {victim.id, chosen.id} <= listed


def test_an_id_taken_first_keeps_the_other_queue_out(two_queues: EngineSettings) -> None:
    key = billing_operator()
    assert attack(key, "nightly-report").status_code == 201
    with pytest.raises(JobIdTaken):  # the later default job is refused, not captured
        services.enqueue(t.add.using(job_id="nightly-report"), 1, 1)
    mirror()
    row = JobRecord.objects.get(id="nightly-report")
    assert row.queue == "billing" and row.args == [6, 6]
    assert len(row.transitions) == 1  # only its own submit; nothing of another queue


def test_the_history_remembers_an_id_that_redis_forgot(two_queues: EngineSettings) -> None:
    services.enqueue(t.add.using(delay_s=600, job_id="old-7"), 1, 2)
    mirror()
    with redis.Redis.from_url(two_queues.redis_url) as r:  # the job and its reservation expired
        r.delete(id_owner_key(two_queues.prefix, "old-7"))
        r.delete(f"{two_queues.prefix}:{{default}}:job:old-7")
    assert attack(billing_operator(), "old-7").status_code == 409
    assert JobRecord.objects.get(id="old-7").queue == "default"


def test_a_tick_id_cannot_be_taken_ahead(two_queues: EngineSettings) -> None:
    tick = f"nightly@{int((datetime.now(UTC) + timedelta(days=1)).timestamp()) * 1000}"
    refused = attack(billing_operator(), tick)
    assert refused.status_code == 422
    with pytest.raises(Exception, match="'@' is kept"):
        t.add.using(job_id=tick)


def test_two_queues_cannot_share_a_schedule_name(two_queues: EngineSettings) -> None:
    services.run_engine(lambda c: c.repeats.add("nightly", t.add.call(1, 2), every_s=60))
    billing = t.add.using(queue="billing").call(1, 2)
    with pytest.raises(Exception, match="another queue"):
        services.run_engine(lambda c: c.repeats.add("nightly", billing, every_s=60))


def test_the_mirror_never_merges_another_queues_events(two_queues: EngineSettings) -> None:
    victim = services.enqueue(t.add.using(delay_s=600), 1, 2)
    mirror()

    async def collide() -> None:  # an engine caller that skips the checks on purpose
        from engine import Client

        async with Client(two_queues) as client:
            job = t.add.using(queue="billing").call(9, 9)
            job.id = victim.id
            await client.enqueue_many([job])

    async_to_sync(collide)()
    mirror()
    row = JobRecord.objects.get(id=victim.id)
    assert row.queue == "default" and row.args == [1, 2] and len(row.transitions) == 1


def test_workers_narrow_to_the_tokens_queues(two_queues: EngineSettings) -> None:
    keys = {
        "billing": make_token(staff_user("b-view", VIEWERS), queues=["billing"]),
        "default": make_token(staff_user("d-view", VIEWERS), queues=["default"]),
    }

    async def scene() -> tuple[str, dict[str, Any]]:
        worker = Worker(two_queues, load_tasks(MODULES), queues=QUEUES, concurrency=2)
        running = asyncio.create_task(worker.run())
        job = await services.aenqueue(t.waits, 30)
        try:
            for _ in range(200):
                listed = await services.arun_engine(lambda c: c.workers.list())
                if listed and listed[0]["current_jobs"]:
                    break
                await asyncio.sleep(0.05)
            seen = {
                name: await asyncio.to_thread(lambda k=key: api("get", "/workers", k).json())
                for name, key in keys.items()
            }
            return job.id, seen
        finally:
            await services.acancel([(job.id, "default")])
            worker.stop()
            await running

    ran, seen = async_to_sync(scene)()
    assert [w["queues"] for w in seen["billing"]] == ["billing"]
    assert seen["billing"][0]["current_jobs"] == []
    assert [j["id"] for j in seen["default"][0]["current_jobs"]] == [ran]
    assert seen["default"][0]["queues"] == "default"


def test_every_operation_narrows_to_the_tokens_queue(two_queues: EngineSettings) -> None:
    """Walk every operation of the schema (the permission table covers them all) with an
    operator token narrowed to billing, aimed at default's jobs and schedules."""
    jobs = make_jobs(two_queues, 1)[0]
    secrets = [*jobs.scheduled, *jobs.failed, jobs.schedule]
    before = dict(JobRecord.objects.values_list("id", "state"))
    key = billing_operator()
    roles.save_role("default", ["default"])  # a role of default's queue, not billing's
    for method, path, body, _perm in api_table(jobs):
        response = api(method, path, key, body)
        text = response.content.decode()
        assert not any(s in text for s in secrets), (method, path, response.status_code, text)
        if method != "get":
            assert response.status_code in (200, 403), (method, path, response.status_code, text)
            if response.status_code == 200:  # bulk and group operations: nothing matched
                assert response.json().get("matched", 0) == 0, (method, path, text)
    mirror()
    assert dict(JobRecord.objects.filter(id__in=before).values_list("id", "state")) == before
    schedule = services.run_engine(lambda c: c.repeats.get("default", jobs.schedule))
    assert schedule is not None and schedule.paused


@pytest.mark.parametrize(
    ("extra", "says", "minimum_s"),
    [
        ({"cron": "0 0 31 2 *"}, "never fires", None),
        ({"cron": "0 0 31 2 *", "paused": True}, "never fires", None),
        ({"every_s": 0.001}, "at least 1 s", None),
        ({"cron": "* * * * * *"}, "fires 1 s apart; the least interval is 5 s", 5),
    ],
)
def test_a_schedule_that_cannot_run_is_a_422(
    two_queues: EngineSettings, extra: dict[str, Any], says: str, minimum_s: float | None
) -> None:
    from django.conf import settings

    key = make_token(staff_user("op", OPERATORS))
    body = {"name": "bad", "task": "add", "args": [1, 2], **extra}
    chosen = {} if minimum_s is None else {"MIN_REPEAT_INTERVAL_S": minimum_s}
    with override_settings(JOBSITE={**settings.JOBSITE, **chosen}):
        answer = api("post", "/schedules", key, body)
    assert answer.status_code == 422 and says in answer.json()["detail"], answer.content
    assert services.run_engine(lambda c: c.repeats.get("default", "bad")) is None


def test_a_schedule_resumed_or_edited_into_never_firing_is_a_422(
    two_queues: EngineSettings,
) -> None:
    key = make_token(staff_user("op", OPERATORS))
    made = api(
        "post", "/schedules", key, {"name": "ok", "task": "add", "args": [1, 2], "every_s": 60}
    )
    assert made.status_code == 201, made.content
    edited = api(
        "put", "/schedules/default/ok", key, {"task": "add", "args": [1, 2], "cron": "0 0 30 2 *"}
    )
    assert edited.status_code == 422 and "never fires" in edited.json()["detail"]
    assert services.run_engine(lambda c: c.repeats.get("default", "ok")).every_s == 60


def test_the_admin_form_refuses_a_cron_that_never_fires(two_queues: EngineSettings) -> None:
    from django.contrib.auth.models import User

    web = WebClient()
    web.force_login(User.objects.create_superuser("boss", "b@example.com", "x"))
    page = web.post(
        "/admin/jobsite/schedule/add/",
        {
            "name": "feb",
            "queue": "default",
            "task": "add",
            "args": "[1, 2]",
            "kwargs": "{}",
            "repeat": "cron",
            "cron": "0 0 31 2 *",
            "tz": "UTC",
        },
    )
    assert page.status_code == 200 and b"never fires" in page.content
    assert services.run_engine(lambda c: c.repeats.get("default", "feb")) is None


def test_duplicate_json_keys_are_a_400_naming_the_key(two_queues: EngineSettings) -> None:
    key = make_token(staff_user("op", OPERATORS))
    answer = api("post", "/jobs", key, '{"task": "add", "args": [1, 2], "args": [3, 4]}')
    assert answer.status_code == 400 and "'args'" in answer.json()["detail"]
    assert not JobRecord.objects.exists()


def test_run_at_has_the_horizon_of_delay_s(two_queues: EngineSettings) -> None:
    key = make_token(staff_user("op", OPERATORS))
    far = api(
        "post", "/jobs", key, {"task": "add", "args": [1, 2], "run_at": "9999-01-01T00:00:00Z"}
    )
    assert far.status_code == 422 and "366 days" in far.json()["detail"]
    near = (datetime.now(UTC) + timedelta(days=30)).isoformat()
    assert (
        api("post", "/jobs", key, {"task": "add", "args": [1, 2], "run_at": near}).status_code
        == 201
    )


def test_every_api_error_is_json(two_queues: EngineSettings) -> None:
    key = make_token(staff_user("op", OPERATORS))
    answer = api("get", "/jobs/a%2Fb", key)
    assert answer.status_code == 404 and answer["Content-Type"] == "application/json"
    assert "detail" in answer.json()


def test_a_refused_login_next_lands_on_the_dashboard(two_queues: EngineSettings) -> None:
    from django.contrib.auth.models import User

    User.objects.create_superuser("boss", "b@example.com", "x")
    answer = WebClient().post(
        "/admin/login/?next=https://evil.example/",
        {"username": "boss", "password": "x", "next": "https://evil.example/"},
    )
    assert answer.status_code == 302 and answer["Location"] == "/dashboard/"


def test_a_job_object_keeps_whether_the_engine_made_its_id() -> None:
    made = t.add.call(1, 2)
    chosen = t.add.using(job_id="mine").call(1, 2)
    assert made.generated_id and not chosen.generated_id
    assert Job.from_dict(chosen.to_dict()).generated_id is False
    assert Job.from_dict(made.to_dict()).generated_id is True
