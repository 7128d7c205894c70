"""Health after Redis was away: a stall of Redis pages nobody; a worker killed still does, at once.

A real worker process serves `default` (jobs waiting in it for their concurrency key's turn, as
in a busy queue) and `beats` (a schedule every few seconds), on a private redis-server; the
health loop runs as runworker runs it (`run_periodic` over `acheck`), its signals and webhook
watched. The worker reaches Redis through a proxy the stall test drives.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import channel_layers
from django.test import override_settings

from engine import Client, EngineSettings, RedisUnavailable, recovery_grace_ms, run_periodic
from engine.dev.devserver import RedisServer
from engine.keys import health_key
from jobsite.jobs import conf
from jobsite.jobs.history import alerts, health
from jobsite.jobs.tasks.signals import queue_health_changed, schedule_health_changed
from tests.engine import tasks as t
from tests.engine.harness import WorkerProc
from tests.faultproxy import FaultProxy

from .conftest import MODULES

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.chaos]

# The health loop's interval: short, so a check runs right after Redis comes back.
INTERVAL_S = 0.5
# Longer than the liveness window and the registry entry's lifetime (2 s and 3 s by default).
STALL_S = 8.0
# How much later than the checks the worker reaches Redis again (well within its grace).
REJOIN_S = 1.0
BAD = {"failing", "degraded", "no_worker", "missed", "late"}


class _Hook(BaseHTTPRequestHandler):
    """The webhook's receiver: records each alert's body."""

    got: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        self.got.append(orjson.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@dataclass
class Site:
    """The private Redis, the worker serving it (through `proxy`), and what health said."""

    server: RedisServer
    proxy: FaultProxy
    worker: WorkerProc
    engine: EngineSettings
    # (kind, name, previous, state) of every signal.
    changes: list[tuple[str, str, str, str]] = field(default_factory=list)

    @property
    def alerts(self) -> list[dict[str, Any]]:
        return _Hook.got


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    """Start a private redis-server, a worker process on it, and point JOBSITE at it."""
    server = RedisServer().start()
    proxy = FaultProxy(server.port)
    receiver = HTTPServer(("127.0.0.1", 0), _Hook)
    _Hook.got = []
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    worker = WorkerProc(
        proxy.url(),
        tmp_path / "ledger.jsonl",
        tasks="tests.engine.tasks",
        queues="default,beats",
        concurrency=4,
        tunables=False,  # the engine's own liveness window and heartbeat, as in production
    )
    values = {
        "REDIS_URL": server.url,
        "PREFIX": "jobsite",
        "TASK_MODULES": MODULES,
        "QUEUES": ["default"],
        "HEALTH": {
            "INTERVAL_S": INTERVAL_S,
            "WEBHOOK_URL": f"http://127.0.0.1:{receiver.server_port}/hook",
            "WEBHOOK_SECRET": "s3cret",
            "WEBHOOK_BACKOFF_S": 0.1,
        },
    }
    memory = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    got: list[tuple[str, str, str, str]] = []

    def on_queue(sender: Any, health: Any, previous: str, **kw: Any) -> None:
        got.append(("queue", health.queue, previous, health.verdict))

    def on_schedule(sender: Any, health: Any, previous: str, **kw: Any) -> None:
        got.append(("schedule", f"{health.queue}/{health.name}", previous, health.state))

    queue_health_changed.connect(on_queue, weak=False)
    schedule_health_changed.connect(on_schedule, weak=False)
    try:
        with override_settings(JOBSITE=values, CHANNEL_LAYERS=memory):
            channel_layers.backends.clear()
            conf.engine_settings.cache_clear()
            yield Site(server, proxy, worker.start(), conf.engine_settings(), got)
    finally:
        queue_health_changed.disconnect(on_queue)
        schedule_health_changed.disconnect(on_schedule)
        conf.engine_settings.cache_clear()
        channel_layers.backends.clear()
        worker.stop()
        proxy.close()
        if server.process is not None:
            server.process.send_signal(signal.SIGCONT)  # never leave it stopped
        server.stop()
        receiver.shutdown()
        receiver.server_close()


async def _busy_and_beating(site: Site) -> None:
    """Fill `default` with jobs that wait (one runs at a time, for minutes), add a schedule on
    `beats`, and wait until the worker is registered and the schedule's first run completed."""
    one_at_a_time = t.waits.using(concurrency_key="one", concurrency_limit=1)
    async with Client(site.engine) as client:
        await client.enqueue_many([one_at_a_time.call(600) for _ in range(30)])
        await client.repeats.add("beat", t.add.using(queue="beats").call(1, 2), every_s=4)
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, site.worker.output()[-2000:]
            workers = await client.workers.list()
            last = await client.redis.hget(client.keys("beats").repeat_last, "beat")
            if (
                workers
                and last
                and (await client.jobs.get(str(last), "beats")).state == "completed"
            ):
                return
            await asyncio.sleep(0.1)


async def _recorded_ok(site: Site, stopping: asyncio.Event) -> None:
    """Wait until the health loop recorded both the queue and the schedule `ok`."""
    names = [("queue", "default"), ("schedule", "beats/beat")]
    with redis.Redis(port=site.server.port, decode_responses=True) as r:
        deadline = time.monotonic() + 15
        while [r.get(health_key("jobsite", kind, name)) for kind, name in names] != ["ok", "ok"]:
            assert time.monotonic() < deadline and not stopping.is_set(), site.changes
            await asyncio.sleep(0.1)


def _bad(site: Site) -> list[Any]:
    return [c for c in site.changes if c[3] in BAD] + [a for a in site.alerts if a["state"] in BAD]


def test_a_redis_stall_longer_than_the_liveness_window_alerts_nothing(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobsite.health")
    grace_s = recovery_grace_ms(site.engine) / 1000
    assert 3 * site.engine.liveness_window_s < STALL_S  # every registry entry lapses meanwhile
    assert site.server.process is not None
    stopped = site.server.process

    async def scenario() -> None:
        await _busy_and_beating(site)
        stopping = asyncio.Event()
        loop = asyncio.create_task(run_periodic("health", health.acheck, stopping))
        try:
            await _recorded_ok(site, stopping)
            assert site.changes == [] and site.alerts == []
            stopped.send_signal(signal.SIGSTOP)
            # The worker cannot reach Redis either, until a moment after the checks can: the
            # first check after the stall finds it not back yet, every time. (Through the stall
            # alone, the command a worker queued during it usually re-registers it within
            # milliseconds: the race that paged after a blip is lost only now and then.)
            site.proxy.refusing.set()
            site.proxy.reset_all()
            await asyncio.sleep(STALL_S)
            stopped.send_signal(signal.SIGCONT)
            for _ in range(5):  # a check as Redis comes back
                try:
                    await health.acheck()
                    break
                except RedisUnavailable:  # a connection the stall broke: the next one
                    await asyncio.sleep(0.05)
            await asyncio.sleep(REJOIN_S)
            site.proxy.refusing.clear()
            # The grace, a check after it, and a few more: all quiet, then both ok again.
            await asyncio.sleep(grace_s + 4 * INTERVAL_S + 3)
            await _recorded_ok(site, stopping)
        finally:
            stopping.set()
            await loop
        await asyncio.gather(*alerts._PENDING)

    async_to_sync(scenario)()
    assert site.worker.alive()
    assert _bad(site) == [], (site.changes, site.alerts)
    assert site.changes == [] and site.alerts == []
    # The worker was alive throughout: Redis held its beats. Each check right after Redis came
    # back said so, where it used to say "failing" and page someone.
    held = [r.getMessage() for r in caplog.records if "health recovering" in r.getMessage()]
    assert any("queue=default" in line for line in held), held
    assert all("Redis was unreachable between" in line for line in held), held


def test_a_killed_worker_is_alerted_as_soon_as_its_entry_lapses(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="jobsite.health")
    # Its registry entry lapses within this of its last beat (engine/worker/upkeep.py).
    entry_s = max(6 * site.engine.heartbeat_interval_s, 3.0)
    # The entry, a check, and room for a loaded host; well within the grace after an outage.
    within_s = entry_s + INTERVAL_S + 1.5

    async def scenario() -> float:
        await _busy_and_beating(site)
        stopping = asyncio.Event()
        loop = asyncio.create_task(run_periodic("health", health.acheck, stopping))
        try:
            await _recorded_ok(site, stopping)
            site.worker.signal(signal.SIGKILL)
            killed = time.monotonic()
            wanted = {("queue", "default", "ok", "failing"), ("schedule", "beats/beat")}
            while not all(any(c[: len(w)] == w for c in site.changes) for w in wanted):
                assert time.monotonic() - killed < 15, site.changes
                await asyncio.sleep(0.05)
            taken = time.monotonic() - killed
            while not any(a["state"] == "failing" for a in site.alerts):
                assert time.monotonic() - killed < 15, site.alerts
                await asyncio.sleep(0.05)
            return taken
        finally:
            stopping.set()
            await loop
            await asyncio.gather(*alerts._PENDING)

    taken_s = async_to_sync(scenario)()
    assert taken_s <= within_s, (taken_s, site.changes)
    queue = [c for c in site.changes if c[0] == "queue"]
    assert queue == [("queue", "default", "ok", "failing")]
    first = next(c for c in site.changes if c[0] == "schedule")
    assert first[2:] in {("ok", "no_worker"), ("ok", "missed")}, site.changes
    [alert] = [a for a in site.alerts if a["kind"] == "queue"]
    assert alert["state"] == "failing" and alert["previous"] == "ok"
    assert alert["reasons"] == ["no live worker serves it and 29 jobs wait"]
    assert not any("health recovering" in r.getMessage() for r in caplog.records)
