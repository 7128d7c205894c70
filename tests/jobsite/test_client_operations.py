"""The Python client's calls of the history, the bulk actions, replay, the queues' pause and
drain, dead-letter groups, tasks and the figures, against the real API (in-process transports),
as test_client.py runs the others."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from asgiref.sync import async_to_sync

from demo.asgi import application as asgi_app
from engine import EngineSettings
from engine import drain as engine_drain
from jobsite.client import AsyncJobsiteClient, Conflict, InvalidRequest, NotFound
from jobsite.jobs import services

from .conftest import mirror_all, run_worker
from .test_client import sync_client

pytestmark = pytest.mark.django_db(transaction=True)


def ids(page: dict[str, object]) -> list[str]:
    return [job["id"] for job in page["items"]]  # type: ignore[attr-defined]


def test_the_history_filtered_paged_both_ways_and_counted(
    engine: EngineSettings, token: str
) -> None:
    with sync_client(token) as api:
        added = [api.submit("add", n, n, delay_s=600)["id"] for n in range(5)]
        other = api.submit("step", "x", delay_s=600)["id"]
        async_to_sync(mirror_all)()

        first = api.jobs(task="add", limit=2)
        assert len(first["items"]) == 2 and first["prev_cursor"] is None
        second = api.jobs(task="add", limit=2, cursor=first["next_cursor"])
        third = api.jobs(task="add", limit=2, cursor=second["next_cursor"])
        assert len(third["items"]) == 1 and third["next_cursor"] is None
        walked = ids(first) + ids(second) + ids(third)
        assert sorted(walked) == sorted(added) and other not in walked
        back = api.jobs(task="add", limit=2, before=third["prev_cursor"])
        assert ids(back) == ids(second)
        assert ids(api.jobs(task="add", limit=2, before=back["prev_cursor"])) == ids(first)
        # The oldest first is the same walk reversed (ties broken by id both ways).
        assert ids(api.jobs(task="add", sort="submitted_at")) == walked[::-1]
        with pytest.raises(InvalidRequest, match="not both"):
            api.jobs(cursor=first["next_cursor"], before=first["next_cursor"])

        assert sorted(ids(api.jobs(ids=added[:2]))) == sorted(added[:2])
        assert ids(api.jobs(task_like="TEP", state="scheduled")) == [other]
        later = datetime.now(UTC) + timedelta(hours=1)
        assert api.jobs(since=later)["items"] == []
        assert len(api.jobs(until=later)["items"]) == 6

        assert api.job_counts(task="add") == {"total": 5, "states": {"scheduled": 5}}
        assert api.job_counts(ids=[other, added[0]])["total"] == 2
        assert api.job_counts(since=later) == {"total": 0, "states": {}}


def test_bulk_cancel_and_retry_by_ids_and_replay(engine: EngineSettings, token: str) -> None:
    with sync_client(token) as api:
        first, second, third = (api.submit("add", n, 1, delay_s=600)["id"] for n in range(3))
        async_to_sync(mirror_all)()
        counted = api.cancel_many([first, second], dry_run=True)
        assert (counted["matched"], counted["changed"]) == (2, 0)
        assert api.get(first)["state"] == "scheduled"
        done = api.cancel_many([first, second, "never-was"])
        assert (done["matched"], done["changed"]) == (2, 2)
        assert done["skipped"] == {"not cancellable (state or permission)": 1}
        assert {api.get(i)["state"] for i in (first, second)} == {"cancelled"}
        assert api.get(third)["state"] == "scheduled"
        with pytest.raises(InvalidRequest, match="choose the jobs"):
            api.cancel_many()

        async_to_sync(mirror_all)()
        assert api.retry_many(state="cancelled", dry_run=True)["matched"] == 2
        assert api.retry_many([first])["changed"] == 1
        assert api.get(first)["state"] == "submitted"

        again = api.replay(second, args=[20, 22])
        assert again["replay_of"] == second and again["args"] == [20, 22]
        same = api.replay(second)  # the original's arguments
        assert (same["args"], same["replay_of"]) == ([1, 1], second)
        with pytest.raises(NotFound):
            api.replay("never-was")
        with pytest.raises(InvalidRequest):
            api.replay(second, args=["not", "numbers", "three"])
        api.cancel(third)
        async_to_sync(run_worker)(engine)
        assert api.get(again["id"])["result"] == 42 and api.get(same["id"])["result"] == 2


def test_queues_paused_resumed_and_drained(engine: EngineSettings, token: str) -> None:
    from django.contrib.auth.models import User

    User.objects.update(is_superuser=True)  # may change the queue
    with sync_client(token) as api:
        waiting = [api.submit("add", n, n)["id"] for n in range(3)]
        [default] = api.queues()
        assert default["name"] == "default" and default["counts"]["submitted"] == 3
        assert api.pause_queue("default")["paused"] is True
        assert api.queue("default")["paused"] is True
        assert api.resume_queue("default")["paused"] is False
        with pytest.raises(NotFound):
            api.pause_queue("nope")

        assert api.drain_status("default")["state"] == "none"
        began = api.drain_queue("default")
        assert (began["queue"], began["waiting"]) == ("default", 3)
        deadline = time.monotonic() + 30
        while (status := api.drain_status("default"))["state"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert (status["state"], status["cancelled"]) == ("done", 3)
        assert {api.get(i)["state"] for i in waiting} == {"cancelled"}
        with pytest.raises(NotFound):
            api.drain_queue("nope")


def test_drain_twice_at_once_is_a_conflict(engine: EngineSettings, token: str) -> None:
    with sync_client(token) as api:
        api.submit("add", 1, 1)
        begun = services.run_engine(lambda c: engine_drain.begin(c, "default", "someone"))
        assert begun is not None  # a drain under way, never run
        with pytest.raises(Conflict):
            api.drain_queue("default")


def test_dead_letter_groups_and_counts_and_a_group_resubmitted(
    engine: EngineSettings, token: str
) -> None:
    with sync_client(token) as api:
        booms = [api.submit("boom", options={"max_retries": 0})["id"] for _ in range(2)]
        async_to_sync(run_worker)(engine)
        async_to_sync(mirror_all)()
        [tally] = api.dead_letter_counts()
        assert (tally["queue"], tally["in_redis"], tally["in_history"]) == ("default", 2, 2)
        assert api.dead_letter_counts(queue="default") == [tally]
        [group] = api.dead_letter_groups()
        assert (group["count"], group["tasks"], group["queues"]) == (2, {"boom": 2}, ["default"])
        assert api.dead_letter_groups(task="add") == []
        fingerprint = group["fingerprint"]
        counted = api.resubmit_dlq(None, fingerprint=fingerprint, dry_run=True)
        assert (counted["matched"], counted["changed"]) == (2, 0)
        again = api.resubmit_dlq(None, fingerprint=fingerprint)
        assert again["changed"] == 2 and sorted(again["ids"]) == sorted(booms)
        async_to_sync(run_worker)(engine)
        async_to_sync(mirror_all)()
        assert api.purge_dlq("default", fingerprint=fingerprint)["changed"] == 2
        assert api.dlq() == []


def test_schedules_tasks_and_the_figures(engine: EngineSettings, token: str) -> None:
    with sync_client(token) as api:
        api.create_schedule("often", "add", 1, 2, every_s=60)
        assert [s["name"] for s in api.schedules()] == ["often"]
        assert api.schedules(queue="nope") == []

        tasks = {t["name"]: t for t in api.tasks()}
        assert tasks["add"]["queue"] == "default"
        assert set(tasks["add"]["arguments"]["properties"]) == {"a", "b"}

        api.submit("add", 1, 2)
        [scaling] = api.scaling()
        assert (scaling["queue"], scaling["runnable"]) == ("default", 1)
        async_to_sync(run_worker)(engine)
        async_to_sync(mirror_all)()
        assert isinstance(api.stats(minutes=5), list)
        charts = api.charts("day", queue="default", task="add")
        assert charts["range"] == "day"
        assert len(charts["t"]) == len(charts["throughput"]["completed"])
        assert isinstance(api.task_stats("hour", queue="default"), list)
        with pytest.raises(InvalidRequest):
            api.charts("year")
        with pytest.raises(InvalidRequest):
            api.stats(minutes=0)


def test_the_async_face_has_the_same_calls(engine: EngineSettings, token: str) -> None:
    async def go() -> tuple[list[str], dict[str, object], list[str]]:
        transport = httpx.ASGITransport(app=asgi_app)
        async with AsyncJobsiteClient("http://testserver", token, transport=transport) as api:
            job = await api.submit("add", 1, 2, delay_s=600)
            await mirror_all()
            page = await api.jobs(task="add", limit=1)
            counts = await api.job_counts(task="add")
            replayed = await api.replay(job["id"], kwargs={"a": 3, "b": 4}, args=[])
            assert replayed["replay_of"] == job["id"]
            names = [t["name"] for t in await api.tasks()]
            return [j["id"] for j in page["items"]] + [job["id"]], counts, names

    listed, counts, names = async_to_sync(go)()
    assert listed[0] == listed[1] and counts == {"total": 1, "states": {"scheduled": 1}}
    assert "add" in names
