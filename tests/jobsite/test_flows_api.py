"""Task options through POST /jobs, flows through POST /flows, a job's graph in its detail, and
one queue's limits through GET /queues/{name} and PUT /queues/{name}/limits."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import redis
from asgiref.sync import async_to_sync
from django.contrib.admin.models import LogEntry
from django.test import Client as WebClient

from engine import Client, EngineSettings, QueueKeys
from engine.periodic.cleaner import Cleaner
from jobsite.jobs import services
from jobsite.jobs.models import JobRecord

from .conftest import mirror_all, run_worker
from .test_api import call

pytestmark = pytest.mark.django_db(transaction=True)


def submit(web: WebClient, token: str, **body: Any) -> Any:
    return call(web, "post", "/jobs", token, data=body)


def engine_job(settings: EngineSettings, job_id: str) -> Any:
    async def go() -> Any:
        async with Client(settings) as client:
            return await client.jobs.get(job_id)

    return async_to_sync(go)()


def test_each_option_reaches_the_job(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    until = datetime.now(UTC) + timedelta(hours=1)
    made = submit(
        web,
        token,
        task="add",
        args=[1, 2],
        max_retries=7,
        retry_delay_s=2,
        backoff="linear",
        max_retry_delay_s=30,
        timeout_s=9,
        ttl_s=600,
        good_until=until.isoformat(),
        queue_timeout_s=300,
        version=1,
        concurrency_key="tenant-1",
        concurrency_limit=2,
        rate_limit="5/s",
        dead_letter_policy="none",
        result_ttl_s=60,
        max_stalls=2,
        on_shutdown="resubmit",
        max_heartbeat_interval_s=20,
    )
    assert made.status_code == 201, made.content
    job = engine_job(engine, made.json()["id"])
    assert job.options == {
        "max_retries": 7,
        "retry_delay_s": 2.0,
        "backoff": "linear",
        "max_retry_delay_s": 30.0,
        "timeout_s": 9.0,
        "dead_letter_policy": "none",
        "result_ttl_s": 60,
        "max_heartbeat_interval_s": 20.0,
        "on_shutdown": "resubmit",
    }
    assert (job.ttl_ms, job.queue_timeout_ms, job.max_stalls) == (600_000, 300_000, 2)
    assert job.good_until_ms == int(until.timestamp() * 1000)
    assert (job.concurrency_key, job.concurrency_limit, job.rate_interval_ms) == (
        "tenant-1",
        2,
        200.0,
    )
    assert job.dlq == "0"


def test_backoff_none_requeues_each_retry_at_once_and_null_keeps_the_tasks(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    at_once = submit(web, token, task="add", args=[1, 2], max_retries=2, backoff="none")
    unset = submit(web, token, task="add", args=[1, 2], max_retries=2, backoff=None)
    assert at_once.status_code == unset.status_code == 201, (at_once.content, unset.content)
    options = engine_job(engine, at_once.json()["id"]).options
    assert "backoff" in options and options["backoff"] is None
    assert "backoff" not in engine_job(engine, unset.json()["id"]).options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"backoff": "sideways"}, "backoff"),
        ({"backoff": -2}, "backoff base must be a positive number"),
        ({"rate_limit": "fast"}, "rate_limit must look like"),
        ({"timeout_s": 0}, "greater than 0"),
        ({"max_retries": -1}, "greater than or equal to 0"),
        ({"deduplication": {"id": "x", "mode": "throttle"}}, "needs a ttl"),
        ({"deduplication": {"mode": "simple"}}, "id"),
        ({"concurrency_limit": 3}, "needs a concurrency_key"),
        ({"on_parent_failure": "retry"}, "on_parent_failure"),
        ({"depends_on": ["no-such-parent"]}, "no-such-parent"),
        ({"no_such_option": 1}, "no_such_option"),
    ],
)
def test_bad_options_get_a_clear_422_and_write_nothing(
    engine: EngineSettings, token: str, options: dict[str, Any], message: str
) -> None:
    answer = submit(WebClient(), token, task="add", args=[1, 2], **options)
    assert answer.status_code == 422, answer.content
    assert message in str(answer.json()["detail"])
    with redis.Redis.from_url(engine.redis_url) as r:
        assert not r.keys("jobsite:{default}:job:*")


def test_deduplication_returns_the_existing_job(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    once = {"deduplication": {"id": "report-7", "ttl_s": 60}}
    first = submit(web, token, task="add", args=[1, 2], **once).json()
    again = submit(web, token, task="add", args=[5, 5], **once)
    assert again.status_code == 201 and again.json()["id"] == first["id"]
    assert again.json()["args"] == [1, 2]


def test_a_timeout_is_enforced(engine: EngineSettings, token: str) -> None:
    made = submit(WebClient(), token, task="waits", args=[5], timeout_s=0.2, max_retries=0).json()
    started = time.monotonic()
    async_to_sync(run_worker)(engine)
    assert time.monotonic() - started < 4
    job = engine_job(engine, made["id"])
    assert job.state == "failed" and "Timeout" in job.errors[-1]["type"]


def test_a_ttl_expires_a_waiting_job(engine: EngineSettings, token: str) -> None:
    made = submit(WebClient(), token, task="add", args=[1, 1], delay_s=60, ttl_s=0.1).json()
    time.sleep(0.2)

    async def sweep() -> None:
        async with Client(engine) as client:
            await Cleaner(engine, client.redis, ["default"]).tick()

    async_to_sync(sweep)()
    assert engine_job(engine, made["id"]).state == "expired"


def flow_body(**extra: Any) -> dict[str, Any]:
    """A diamond: a -> (b, c) -> d."""
    return {
        "jobs": [
            {"ref": "d", "task": "step", "args": ["d"], "depends_on": ["b", "c"]},
            {"ref": "a", "task": "step", "args": ["a"]},
            {"ref": "b", "task": "step", "args": ["b"], "depends_on": ["a"]},
            {"ref": "c", "task": "step", "args": ["c"], "depends_on": ["a"], "priority": 5},
        ],
        **extra,
    }


def test_a_flow_runs_and_its_graph_is_in_each_detail(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    made = call(web, "post", "/flows", token, data=flow_body())
    assert made.status_code == 201, made.content
    out = made.json()
    jobs = {j["ref"]: j for j in out["jobs"]}
    assert [j["ref"] for j in out["jobs"]] == ["d", "a", "b", "c"]
    assert jobs["a"]["state"] == "submitted"
    assert {jobs[r]["state"] for r in "bcd"} == {"blocked"}
    assert sorted(jobs["d"]["parents"]) == sorted([jobs["b"]["id"], jobs["c"]["id"]])
    assert out["flow_id"]
    async_to_sync(mirror_all)()
    listed = call(web, "get", "/jobs?state=blocked&limit=10", token).json()["items"]
    assert sorted(j["id"] for j in listed) == sorted(jobs[r]["id"] for r in "bcd")
    before = call(web, "get", f"/jobs/{jobs['b']['id']}", token).json()
    assert before["flow_id"] == out["flow_id"] and len(before["flow"]) == 4
    assert [(p["id"], p["state"]) for p in before["parents"]] == [(jobs["a"]["id"], "submitted")]
    assert [(c["id"], c["state"]) for c in before["children"]] == [(jobs["d"]["id"], "blocked")]
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    assert JobRecord.objects.filter(flow_id=out["flow_id"], state="completed").count() == 4
    row = JobRecord.objects.get(id=jobs["d"]["id"])
    assert sorted(row.parents) == sorted([jobs["b"]["id"], jobs["c"]["id"]])
    detail = call(web, "get", f"/jobs/{jobs['a']['id']}", token).json()
    assert detail["parents"] == []
    assert sorted(c["id"] for c in detail["children"]) == sorted([jobs["b"]["id"], jobs["c"]["id"]])
    assert {n["state"] for n in detail["flow"]} == {"completed"}
    assert detail["result"] == {"label": "a", "saw": []}
    assert engine_job(engine, jobs["d"]["id"]).result == {"label": "d", "saw": ["b", "c"]}
    assert LogEntry.objects.filter(change_message__contains="flow").count() == 4
    redis.Redis.from_url(engine.redis_url).flushdb()  # the history alone tells the graph now
    gone = call(web, "get", f"/jobs/{jobs['d']['id']}", token).json()
    assert gone["flow_id"] == out["flow_id"] and len(gone["flow"]) == 4
    assert sorted(p["id"] for p in gone["parents"]) == sorted([jobs["b"]["id"], jobs["c"]["id"]])
    assert {p["state"] for p in gone["parents"]} == {"completed"}


def test_a_blocked_job_is_cancellable_through_the_api(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    out = call(web, "post", "/flows", token, data=flow_body()).json()
    d = next(j for j in out["jobs"] if j["ref"] == "d")
    gone = call(web, "delete", f"/jobs/{d['id']}", token)
    assert gone.status_code == 202 and gone.json()["outcome"] == "cancelled"
    async_to_sync(mirror_all)()
    bulk = call(web, "post", "/bulk/cancel", token, data={"state": "blocked"})
    assert bulk.status_code == 200 and bulk.json()["changed"] == 2


def test_the_parent_failure_policy_of_a_flow(engine: EngineSettings, token: str) -> None:
    body = {
        "on_parent_failure": "cancel",
        "jobs": [
            {"ref": "p", "task": "boom"},
            {"ref": "c1", "task": "step", "args": ["c1"], "depends_on": ["p"]},
            {
                "ref": "c2",
                "task": "step",
                "args": ["c2"],
                "depends_on": ["p"],
                "on_parent_failure": "fail",
            },
        ],
    }
    out = call(WebClient(), "post", "/flows", token, data=body).json()
    async_to_sync(run_worker)(engine)
    states = {j["ref"]: engine_job(engine, j["id"]).state for j in out["jobs"]}
    assert states == {"p": "failed", "c1": "cancelled", "c2": "failed"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: b["jobs"][1].update(depends_on=["d"]), "cycle"),
        (lambda b: b["jobs"][1].update(depends_on=["a"]), "depends on itself"),
        (lambda b: b["jobs"][0].update(depends_on=["b", "zzz"]), "'zzz'"),
        (lambda b: b["jobs"][2].update(ref="a"), "names two jobs"),
        (lambda b: b["jobs"][3].update(args=[]), "job 'c'"),
        (lambda b: b["jobs"][3].update(task="no.such"), "job 'c': unknown task"),
        (lambda b: b["jobs"][3].update(timeout_s=-1), "greater than 0"),
        (lambda b: b["jobs"][3].update(rate_limit="often"), "job 'c': rate_limit"),
        (lambda b: b["jobs"][3].update(queue="other"), "one queue"),
        (lambda b: b["jobs"][0].update(job_id="taken"), "are taken"),
    ],
)
def test_a_bad_flow_writes_nothing(
    engine: EngineSettings, token: str, change: Any, message: str
) -> None:
    web = WebClient()
    assert submit(web, token, task="add", args=[1, 1], job_id="taken").status_code == 201
    with redis.Redis.from_url(engine.redis_url) as r:
        before = sorted(r.keys("*"))
        body = flow_body()
        change(body)
        answer = call(web, "post", "/flows", token, data=body)
        assert answer.status_code in (409, 422), answer.content
        assert message in str(answer.json()["detail"])
        assert sorted(r.keys("*")) == before


def test_a_flow_needs_submit_on_its_queue(engine: EngineSettings) -> None:
    from jobsite.jobs.permissions import OPERATORS

    from .conftest import make_token, staff_user

    scoped = make_token(staff_user("scoped", OPERATORS), queues=["elsewhere"])
    answer = call(WebClient(), "post", "/flows", scoped, data=flow_body())
    assert answer.status_code == 403 and "queue 'default'" in answer.json()["detail"]


def test_queue_shows_the_history_gaps(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    submit(web, token, task="add", args=[1, 1])
    got = call(web, "get", "/queues/default", token).json()
    assert got["history_gap"] == {"entries": 0, "rebuilt": 0, "lost": 0}
    stats = QueueKeys(engine.prefix, "default").stats
    with redis.Redis.from_url(engine.redis_url) as r:  # as trim-3.lua and the mirror count
        r.hset(stats, mapping={"gap_entries": 9, "gap_rebuilt": 2, "gap_lost": 1})
        r.hset(stats, "gap_unrecorded", 1)
    got = call(web, "get", "/queues/default", token).json()
    assert got["history_gap"] == {"entries": 9, "rebuilt": 2, "lost": 2}


def test_queue_limits_are_set_and_read(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    keyed = {"task": "tenant_work", "concurrency_limit": 1}
    for n in range(3):
        submit(web, token, args=["acme", n], **keyed)
    submit(web, token, args=["solo", 0], **keyed)
    got = call(web, "get", "/queues/default", token).json()
    assert got["rate_limit"] is None and got["paused"] is False
    assert got["concurrency_keys"] == [{"key": "acme", "waiting": 2, "active": 1}]
    put = call(
        web, "put", "/queues/default/limits", token, data={"rate_limit": "20/m", "paused": True}
    )
    assert put.status_code == 200, put.content
    assert put.json()["rate_limit"] == {"interval_ms": 3000.0, "per_s": 0.333333}
    assert put.json()["paused"] is True
    with redis.Redis.from_url(engine.redis_url, decode_responses=True) as r:
        assert r.hget("jobsite:{default}:meta", "rate_interval_ms") == "3000.000"
    bad = call(web, "put", "/queues/default/limits", token, data={"rate_limit": "lots"})
    assert bad.status_code == 422 and "rate_limit must look like" in bad.json()["detail"]
    assert call(web, "get", "/queues/default", token).json()["rate_limit"]["per_s"] == 0.333333
    lifted = call(web, "put", "/queues/default/limits", token, data={"rate_limit": None})
    assert lifted.json()["rate_limit"] is None and lifted.json()["paused"] is True
    assert call(web, "get", "/queues/nope", token).status_code == 404
    assert (
        call(web, "put", "/queues/nope/limits", token, data={"rate_limit": None}).status_code == 404
    )
    assert LogEntry.objects.filter(change_message__contains="rate_limit=20/m").count() == 1


def test_a_queue_cap_is_set_alone_and_lifted(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    submit(web, token, task="add", args=[1, 1])
    limits = "/queues/default/limits"
    assert call(web, "put", limits, token, data={"rate_limit": "20/m"}).status_code == 200
    capped = call(web, "put", limits, token, data={"max_running": 4})
    assert capped.status_code == 200, capped.content
    # Only what the body names changes: the rate limit stays.
    assert capped.json()["max_running"] == 4 and capped.json()["rate_limit"]["per_s"] == 0.333333
    assert call(web, "get", "/queues/default", token).json()["max_running"] == 4
    with redis.Redis.from_url(engine.redis_url, decode_responses=True) as r:
        assert r.hget("jobsite:{default}:meta", "max_running") == "4"
    for bad in (0, -3, 2.5, "many", True):
        refused = call(web, "put", limits, token, data={"max_running": bad})
        assert refused.status_code == 422, (bad, refused.content)
    lifted = call(web, "put", limits, token, data={"max_running": None})
    assert lifted.json()["max_running"] is None and lifted.json()["rate_limit"] is not None
    assert LogEntry.objects.filter(change_message__contains="max_running=4").count() == 1


def test_blocked_jobs_are_filtered_and_cancelled_in_the_admin(
    engine: EngineSettings, token: str
) -> None:
    from django.contrib.auth.models import User

    out = call(WebClient(), "post", "/flows", token, data=flow_body()).json()
    blocked = sorted(j["id"] for j in out["jobs"] if j["state"] == "blocked")
    async_to_sync(mirror_all)()
    admin = WebClient()
    admin.force_login(User.objects.create_superuser("root", "root@example.com", "x"))
    page = admin.get("/admin/jobsite/jobrecord/?state__exact=blocked")
    assert page.status_code == 200
    assert sorted(r.id for r in page.context["cl"].result_list) == blocked
    form = {"action": "cancel_jobs", "_selected_action": blocked, "index": "0", "post": "yes"}
    assert admin.post("/admin/jobsite/jobrecord/", form).status_code in (200, 302)
    assert {engine_job(engine, i).state for i in blocked} == {"cancelled"}


def test_flows_are_listed_and_found_by_their_id(engine: EngineSettings, token: str) -> None:
    from jobsite.jobs.permissions import VIEWERS

    from .conftest import make_token, staff_user

    web = WebClient()
    out = call(web, "post", "/flows", token, data=flow_body()).json()
    async_to_sync(mirror_all)()
    [listed] = call(web, "get", "/flows", token).json()
    assert (listed["flow_id"], listed["queue"], listed["jobs"]) == (out["flow_id"], "default", 4)
    assert listed["states"] == {"submitted": 1, "blocked": 3}
    async_to_sync(run_worker)(engine)  # Redis is ahead of the history: its states are shown
    detail = call(web, "get", f"/flows/{out['flow_id']}", token).json()
    assert detail["states"] == {"completed": 4} and len(detail["graph"]) == 4
    by_id = {n["id"]: n for n in detail["graph"]}
    d = next(j for j in out["jobs"] if j["ref"] == "d")
    assert sorted(by_id[d["id"]]["parents"]) == sorted(d["parents"])
    elsewhere = make_token(staff_user("far", VIEWERS), queues=["other"])
    assert call(web, "get", "/flows", elsewhere).json() == []
    assert call(web, "get", f"/flows/{out['flow_id']}", elsewhere).status_code == 404
    assert call(web, "get", "/flows/nope", token).status_code == 404


def test_a_named_flow_is_listed_by_its_name_with_its_jobs_parents_first(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    named = call(web, "post", "/flows", token, data=flow_body(name="Nightly import")).json()
    other = call(web, "post", "/flows", token, data=flow_body()).json()
    assert named["name"] == "Nightly import" and other["name"] is None
    async_to_sync(mirror_all)()
    listed = {f["flow_id"]: f["name"] for f in call(web, "get", "/flows", token).json()}
    assert listed == {named["flow_id"]: "Nightly import", other["flow_id"]: None}
    [found] = call(web, "get", "/flows?name=nightly", token).json()  # any case, part of it
    assert found["flow_id"] == named["flow_id"]
    detail = call(web, "get", f"/flows/{named['flow_id']}", token).json()
    assert detail["name"] == "Nightly import"
    ref = {j["id"]: j["ref"] for j in named["jobs"]}
    order = [ref[node["id"]] for node in detail["graph"]]
    assert order[0] == "a" and order[-1] == "d" and set(order[1:3]) == {"b", "c"}
    too_long = call(web, "post", "/flows", token, data=flow_body(name="x" * 201))
    assert too_long.status_code == 422


def test_a_deduplication_id_is_read_and_freed(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    path = "/queues/default/deduplication/order-7"
    assert call(web, "get", path, token).json()["job_id"] is None  # free
    first = submit(web, token, task="add", args=[1, 1], deduplication={"id": "order-7"}).json()
    again = submit(web, token, task="add", args=[2, 2], deduplication={"id": "order-7"}).json()
    assert again["id"] == first["id"]  # held: the duplicate is the first job
    assert call(web, "get", path, token).json() == {
        "queue": "default",
        "deduplication_id": "order-7",
        "job_id": first["id"],
        "freed": False,
    }
    freed = call(web, "delete", path, token).json()
    assert freed["freed"] is True and freed["job_id"] == first["id"]
    third = submit(web, token, task="add", args=[3, 3], deduplication={"id": "order-7"}).json()
    assert third["id"] != first["id"]  # the next job with the id is submitted
    assert LogEntry.objects.filter(change_message__contains="'order-7' (held by").count() == 1
    bad = call(web, "get", "/queues/default/deduplication/a%07b", token)
    assert bad.status_code == 422
    # The Python client of the API, the same two calls.
    from demo.wsgi import application as wsgi_app
    from jobsite.client import JobsiteClient

    transport = httpx.WSGITransport(app=wsgi_app)
    with JobsiteClient("http://testserver", token, transport=transport) as api:
        assert api.deduplication("default", "order-7")["job_id"] == third["id"]
        assert api.free_deduplication("default", "order-7")["freed"] is True
        assert api.deduplication("default", "order-7")["job_id"] is None


def test_a_batch_submits_each_job_on_its_own(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    add = {"task": "add", "args": [1, 2]}
    made = call(
        web, "post", "/jobs/batch", token, data={"jobs": [add, add, {**add, "job_id": "b-1"}]}
    )
    assert made.status_code == 201, made.content
    jobs = made.json()["jobs"]
    assert [j["state"] for j in jobs] == ["submitted"] * 3 and jobs[2]["id"] == "b-1"
    counts = services.run_engine(lambda c: c.queues.counts("default"))
    assert counts["submitted"] == 3
    # Checked as POST /jobs checks one, before anything reaches Redis: the job named by place.
    wrong = call(
        web, "post", "/jobs/batch", token, data={"jobs": [add, {"task": "add", "args": ["x", 2]}]}
    )
    assert wrong.status_code == 422 and "argument 'a'" in wrong.json()["detail"]
    flow = call(web, "post", "/jobs/batch", token, data={"jobs": [{**add, "depends_on": ["b-1"]}]})
    assert flow.status_code == 422 and "job 0: depends_on makes a flow" in flow.json()["detail"]
    unknown = call(web, "post", "/jobs/batch", token, data={"jobs": [{"task": "nope"}]})
    assert unknown.status_code == 422 and "job 0: unknown task" in unknown.json()["detail"]
    assert services.run_engine(lambda c: c.queues.counts("default"))["submitted"] == 3
    # Not all or nothing: a taken id is named, the others go in.
    taken = call(web, "post", "/jobs/batch", token, data={"jobs": [{**add, "job_id": "b-1"}, add]})
    assert taken.status_code == 409 and "b-1" in taken.json()["detail"]
    assert services.run_engine(lambda c: c.queues.counts("default"))["submitted"] == 4
    assert call(web, "post", "/jobs/batch", token, data={"jobs": []}).status_code == 422
    from demo.wsgi import application as wsgi_app
    from jobsite.client import JobsiteClient, batch_job

    transport = httpx.WSGITransport(app=wsgi_app)
    with JobsiteClient("http://testserver", token, transport=transport) as api:
        out = api.submit_batch([batch_job("add", 1, 1), batch_job("add", 2, b=2)])
        assert [j["task"] for j in out["jobs"]] == ["add", "add"]
    assert services.run_engine(lambda c: c.queues.counts("default"))["submitted"] == 6
