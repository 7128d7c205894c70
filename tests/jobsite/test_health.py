"""Queue verdicts and schedule states in Django: reasons, a signal per change, alerts delivered."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import override_settings

from engine import Client, EngineSettings, Worker
from engine.dev.devserver import free_port
from engine.resources.duties.feed import register_group
from jobsite.jobs.history import alerts, health
from jobsite.jobs.permissions import OPERATORS
from jobsite.jobs.tasks.signals import queue_health_changed, schedule_health_changed
from tests.engine import tasks as t

from .conftest import make_token, mirror_all, run_worker, staff_user

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


class _Hook(BaseHTTPRequestHandler):
    """A receiver on loopback: answers each POST with the next of `answers` (a status, with a
    Location for a 3xx), and records (method, path, headers, body) of every request."""

    answers: list[int] = []
    seen: list[tuple[str, str, dict[str, str], bytes]] = []
    elsewhere = ""

    def _record(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.command, self.path, dict(self.headers), body))

    def do_POST(self) -> None:
        self._record()
        status = self.answers.pop(0) if self.answers else 204
        self.send_response(status)
        if 300 <= status < 400:
            self.send_header("Location", self.elsewhere)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self._record()
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def hook_server(answers: list[int]) -> Iterator[str]:
    """Serve _Hook on a free loopback port; yield its URL."""
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    _Hook.answers, _Hook.seen = list(answers), []
    url = f"http://127.0.0.1:{server.server_port}"
    _Hook.elsewhere = f"{url}/elsewhere"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()


ALERT = {"kind": "queue", "queue": "default", "state": "failing", "previous": "ok", "reasons": []}


def _post(url: str, attempts: int) -> bool:
    return async_to_sync(alerts.post)(url, "s3cret", dict(ALERT), attempts, 0.01, 5.0)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_webhook_redirect_is_a_failed_delivery_never_followed(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    with hook_server([status, status, status]) as url, caplog.at_level("WARNING"):
        delivered = _post(f"{url}/hook", attempts=3)
    assert not delivered  # lost alerts are not counted delivered
    # Tried again like any failure, never at the redirect's target (which would get the headers).
    assert [(method, path) for method, path, _, _ in _Hook.seen] == [("POST", "/hook")] * 3
    failed = [r.getMessage() for r in caplog.records if "delivery failed" in r.getMessage()]
    assert len(failed) == 3 and all(f"status {status}" in line for line in failed), failed
    assert all(re.search(r"event_id=\w+ attempt=\d of=3 error=", line) for line in failed)
    assert any("webhook alert dropped" in r.getMessage() for r in caplog.records)


def test_a_webhook_redirect_then_success_is_delivered_on_a_retry() -> None:
    with hook_server([302, 204]) as url:
        assert _post(f"{url}/hook", attempts=3)
    assert [path for _, path, _, _ in _Hook.seen] == ["/hook", "/hook"]


def test_every_attempt_of_an_alert_carries_one_event_id_in_header_and_signed_body() -> None:
    with hook_server([500, 503, 204, 204]) as url:
        assert _post(f"{url}/hook", attempts=4)
        assert _post(f"{url}/hook", attempts=4)  # another alert
    headers = [h for _, _, h, _ in _Hook.seen]
    bodies = [b for _, _, _, b in _Hook.seen]
    ids = [h["X-Jobsite-Event-Id"] for h in headers]
    assert len(ids) == 4 and ids[0] == ids[1] == ids[2] != ids[3]
    for h, body in zip(headers, bodies, strict=True):
        assert orjson.loads(body)["event_id"] == h["X-Jobsite-Event-Id"]
        assert alerts.verify(body, "s3cret", h["X-Jobsite-Timestamp"], h["X-Jobsite-Signature"])
    # The id is signed: a body with another id does not verify.
    forged = bodies[0].replace(ids[0].encode(), ids[3].encode())
    h = headers[0]
    assert not alerts.verify(forged, "s3cret", h["X-Jobsite-Timestamp"], h["X-Jobsite-Signature"])


def test_a_webhook_url_that_is_not_http_is_refused_and_retried() -> None:
    assert not async_to_sync(alerts.post)("file:///etc/passwd", "s", dict(ALERT), 2, 0.01, 1.0)


async def client_count(engine: EngineSettings) -> int:
    async with Client(engine) as client:
        return (await client.queues.counts("default"))["completed_total"]


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


def test_health_hides_server_wide_redis_figures_from_a_token_narrowed_to_queues(
    engine: EngineSettings,
) -> None:
    from django.test import Client as WebClient

    user = staff_user("ops", OPERATORS)
    narrowed = make_token(user, queues=["default"])
    everywhere = make_token(user)
    for key, shown in ((everywhere, True), (narrowed, False)):
        answer = WebClient(HTTP_AUTHORIZATION=f"Bearer {key}").get("/api/v1/health")
        assert answer.status_code == 200
        redis = answer.json()["redis"]
        assert (redis is not None) == shown, redis
        if shown:
            assert redis["used_memory_bytes"] > 0 and redis["uptime_s"] >= 0
        else:
            assert "used_memory" not in answer.content.decode()
