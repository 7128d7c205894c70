"""The Django mirror on a 3-master Redis Cluster: two queues whose streams live on two masters."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from engine import Client, EngineSettings, Worker
from engine.dev.devcluster import ClusterServer
from engine.resources.duties.feed import EventReader
from jobsite.jobs import conf
from jobsite.jobs.models import JobRecord
from jobsite.jobs.tasks.registry import load_tasks
from tests.engine import tasks as t

from .conftest import MODULES, mirror_all

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = ["default", "a"]  # slots 5718 and 15495: two masters


@pytest.fixture
def on_cluster(redis_cluster: ClusterServer) -> Iterator[EngineSettings]:
    """Point settings.JOBSITE at the flushed private cluster, serving QUEUES."""
    redis_cluster.flushall()
    values = {
        "REDIS_URL": redis_cluster.url,
        "TASK_MODULES": MODULES,
        "QUEUES": QUEUES,
        "SCHEDULER_INTERVAL_S": 0.05,
        "IDLE_WAIT_S": 0.2,
    }
    with override_settings(JOBSITE=values):
        conf.engine_settings.cache_clear()
        yield conf.engine_settings()
    conf.engine_settings.cache_clear()


async def _history(settings: EngineSettings) -> list[str]:
    async with Client(settings) as client:
        jobs = [await client.enqueue(t.add.using(queue=q), n, n) for n in range(5) for q in QUEUES]
        jobs.append(await client.enqueue(t.boom.using(queue="a", max_retries=0)))
    await Worker(settings, load_tasks(MODULES), queues=QUEUES, burst=True).run()
    return [job.id for job in jobs]


def test_the_mirror_follows_two_queues_on_two_masters(on_cluster: EngineSettings) -> None:
    ids = async_to_sync(_history)(on_cluster)
    assert async_to_sync(mirror_all)("mirror-cluster", QUEUES) > 0
    rows = {row.id: row for row in JobRecord.objects.all()}
    assert set(rows) == set(ids)
    assert {row.queue for row in rows.values()} == set(QUEUES)
    assert sum(row.state == "completed" for row in rows.values()) == 10
    assert rows[ids[-1]].state == "failed"
    # Nothing is left unread or unacked: a second mirror applies nothing.
    assert async_to_sync(mirror_all)("mirror-cluster", QUEUES) == 0


def test_a_slow_slot_read_is_not_taken_for_an_idle_stream(
    on_cluster: EngineSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that finds nothing while another slot's read is still in flight waits for it: a
    mirror drained until `step` returns 0 has applied every queue."""
    ids = async_to_sync(_history)(on_cluster)
    read_group = EventReader._read_group

    async def slow_on_a(self: EventReader, streams: list[str], *args: Any) -> Any:
        if any("{a}" in s for s in streams):
            await asyncio.sleep(0.3)  # longer than a step's write: still in flight after it
        return await read_group(self, streams, *args)

    monkeypatch.setattr(EventReader, "_read_group", slow_on_a)
    async_to_sync(mirror_all)("mirror-slow", QUEUES)
    assert set(JobRecord.objects.values_list("id", flat=True)) == set(ids)
