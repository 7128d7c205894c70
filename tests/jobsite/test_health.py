"""Queue verdicts and schedule states in Django: reasons, a signal per change, alerts delivered."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import override_settings

from engine import Client, EngineSettings, Worker
from engine.dev.devserver import free_port
from engine.stream.events import register_group
from jobsite.jobs.history import alerts, health
from jobsite.jobs.tasks.signals import queue_health_changed, schedule_health_changed
from tests.engine import tasks as t

from .conftest import mirror_all, run_worker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def changes() -> Iterator[list[tuple[str, str, str, str]]]:
    """Record (kind, name, previous, state) of every health signal."""
    got: list[tuple[str, str, str, str]] = []

    def on_queue(sender: Any, health: Any, previous: str, **kw: Any) -> None:
        got.append(("queue", health.queue, previous, health.verdict))

    def on_schedule(sender: Any, health: Any, previous: str, **kw: Any) -> None:
        got.append(("schedule", f"{health.queue}/{health.name}", previous, health.state))

    queue_health_changed.connect(on_queue, weak=False)
    schedule_health_changed.connect(on_schedule, weak=False)
    yield got
    queue_health_changed.disconnect(on_queue)
    schedule_health_changed.disconnect(on_schedule)


def _enqueue(engine: EngineSettings, task: Any, *args: Any) -> None:
    async def go() -> None:
        async with Client(engine) as client:
            await client.enqueue(task, *args)

    async_to_sync(go)()


def test_a_queue_nobody_serves_with_waiting_jobs_fails_and_signals_once_per_change(
    engine: EngineSettings, changes: list[tuple[str, str, str, str]]
) -> None:
    [first] = health.check()  # configured, and no worker serves it
    assert (first["state"], first["reasons"]) == ("degraded", ["no live worker serves it"])
    _enqueue(engine, t.add, 1, 2)
    [verdict] = health.queue_health(["default"])
    assert verdict.verdict == "failing"
    assert verdict.reasons == ["no live worker serves it and 1 jobs wait"]
    [alert] = health.check()
    assert alert["state"] == "failing" and alert["previous"] == "degraded"
    assert health.check() == []  # no change, no second signal
    async_to_sync(run_worker)(engine)
    health.check()
    health.check()
    assert changes == [
        ("queue", "default", "ok", "degraded"),
        ("queue", "default", "degraded", "failing"),
        ("queue", "default", "failing", "degraded"),  # nothing waits; still nobody serves it
    ]
    assert health.queue_health(["default"])[0].reasons == ["no live worker serves it"]


def test_a_task_failing_80_percent_is_degraded(engine: EngineSettings) -> None:
    t.FAIL_ONCE.update({"seen-1", "seen-2"})  # these two succeed; eight fail
    for label in ["seen-1", "seen-2", *[f"new-{i}-{time.time_ns()}" for i in range(8)]]:
        _enqueue(engine, t.fails_first_time, label)
    async_to_sync(run_worker)(engine)
    async_to_sync(mirror_all)()
    [verdict] = health.queue_health(["default"])
    assert verdict.verdict == "degraded"
    assert (
        "task fails_first_time failed 80% of its last 10 runs, against 0% over the day before"
        in verdict.reasons
    )


def test_a_consumer_group_that_lags_degrades_the_queue(engine: EngineSettings) -> None:
    # The transition hooks' group keeps the stream from being trimmed while it lags.
    _enqueue(engine, t.add, 1, 2)
    async_to_sync(mirror_all)()  # the mirror itself is caught up

    async def hooks_group_at_start() -> None:
        async with Client(engine) as client:
            await register_group(client.redis, engine.prefix, "hooks")
            await client.redis.xgroup_create(client.keys("default").events, "hooks", id="0")

    async_to_sync(hooks_group_at_start)()
    time.sleep(0.3)
    with override_settings(JOBSITE={**settings.JOBSITE, "HEALTH": {"MIRROR_LAG_S": 0.2}}):
        [verdict] = health.queue_health(["default"])
    assert verdict.verdict == "failing"  # nobody serves the queue, and a job waits
    [reason] = [r for r in verdict.reasons if "consumer group" in r]
    assert re.fullmatch(
        r"the event stream's consumer group 'hooks' is \d+ s and 1 events behind "
        r"\(threshold 0.2 s\); the stream is kept until it catches up",
        reason,
    )
    assert verdict.figures["groups_lag_s"] >= 0.3
    assert not any("history mirror" in r for r in verdict.reasons)


def test_a_missed_schedule_signals_once(
    engine: EngineSettings, changes: list[tuple[str, str, str, str]]
) -> None:
    async def add() -> None:
        async with Client(engine) as client:
            await client.repeats.add("beat", t.add.using(queue="lonely").call(1, 2), every_s=1)

    async_to_sync(add)()
    deadline = time.monotonic() + 4
    while not any(c[0] == "schedule" and c[3] == "missed" for c in changes):
        assert time.monotonic() < deadline, changes
        health.check()
        time.sleep(0.1)
    health.check()
    schedule = [c for c in changes if c[0] == "schedule"]
    assert schedule == [
        ("schedule", "lonely/beat", "ok", "no_worker"),
        ("schedule", "lonely/beat", "no_worker", "missed"),
    ]
    [state] = [s for s in health.schedule_health(["lonely"]) if s.name == "beat"]
    assert state.state == "missed"


class _Receiver(BaseHTTPRequestHandler):
    got: list[tuple[bytes, str, str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        stamp, signature = self.headers["X-Jobsite-Timestamp"], self.headers["X-Jobsite-Signature"]
        self.got.append((body, stamp, signature))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_the_webhook_is_signed_and_retried_while_the_worker_goes_on(
    engine: EngineSettings,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    options = {"WEBHOOK_URL": url, "WEBHOOK_SECRET": "s3cret", "WEBHOOK_BACKOFF_S": 0.1}
    _Receiver.got = []
    for i in range(20):
        _enqueue(engine, t.add, i, i)

    async def scenario() -> tuple[bool, bool, int]:
        [delivery] = alerts.deliver(
            {
                "kind": "queue",
                "queue": "default",
                "state": "failing",
                "previous": "ok",
                "reasons": ["no live worker"],
            },
            health.settings(),
        )
        await Worker(engine, [t.add], burst=True).run()  # the receiver is still down
        pending_after_worker = not delivery.done()
        done = await client_count(engine)
        server = HTTPServer(("127.0.0.1", port), _Receiver)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            delivered = await asyncio.wait_for(delivery, timeout=30)
        finally:
            server.shutdown()
        return pending_after_worker, delivered, done

    with override_settings(JOBSITE={**settings.JOBSITE, "HEALTH": options}):
        pending_after_worker, delivered, done = async_to_sync(scenario)()
    assert done == 20  # every job ran while the webhook could not be delivered
    assert pending_after_worker and delivered
    [(body, stamp, signature)] = _Receiver.got
    assert alerts.verify(body, "s3cret", stamp, signature)
    assert not alerts.verify(body, "other", stamp, signature)
    assert not alerts.verify(body + b" ", "s3cret", stamp, signature)


async def client_count(engine: EngineSettings) -> int:
    async with Client(engine) as client:
        return (await client.counts("default"))["completed_total"]


def test_health_through_the_api_and_the_metrics_with_a_schedules_tolerance(
    engine: EngineSettings, token: str
) -> None:
    from django.test import Client as WebClient

    web = WebClient(HTTP_AUTHORIZATION=f"Bearer {token}")
    made = web.post(
        "/api/v1/schedules",
        {"name": "hourly", "task": "add", "args": [1, 2], "every_s": 3600, "tolerance_s": 30},
        content_type="application/json",
    )
    assert made.status_code == 201, made.content
    assert made.json()["tolerance_s"] == 30
    _enqueue(engine, t.add, 1, 2)
    answer = web.get("/api/v1/health").json()
    assert [(q["queue"], q["verdict"]) for q in answer["queues"]] == [("default", "failing")]
    [schedule] = answer["schedules"]
    assert (schedule["name"], schedule["state"], schedule["tolerance_s"]) == (
        "hourly",
        "no_worker",
        30,
    )
    scrape = web.get("/metrics").content.decode()
    assert 'jobsite_queue_health{queue="default",verdict="failing"} 1.0' in scrape
    assert 'jobsite_schedule_health{queue="default",schedule="hourly",state="no_worker"} 1.0' in (
        scrape
    )
    rules = yaml.safe_load((Path(__file__).parents[2] / "docs/alerts.rules.yml").read_text())
    for rule in rules["groups"][0]["rules"]:
        metric = re.match(r"[\w(), ]*?(jobsite_\w+)", rule["expr"])
        assert metric and metric.group(1) in scrape, rule["expr"]
