"""The Prometheus endpoint: counts equal what the worker did; anonymous scrapes are refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client as WebClient
from django.test import override_settings
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from engine import EngineSettings
from engine.dev.devserver import free_port
from jobsite.jobs import conf, services
from jobsite.jobs.models import OutboxEntry
from jobsite.jobs.permissions import VIEWERS
from tests.engine import tasks as t

from .conftest import make_token, mirror_all, run_worker, staff_user

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "scrape-" + "s" * 32


@pytest.fixture
def metrics_token(engine: EngineSettings) -> Iterator[str]:
    """Set JOBSITE["METRICS_TOKEN"]; return it."""
    with override_settings(JOBSITE={**settings.JOBSITE, "METRICS_TOKEN": SECRET}):
        yield SECRET


def scrape(web: WebClient, token: str | None = None, **headers: Any) -> Any:
    if token is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return web.get(reverse("jobsite:metrics"), **headers)


def samples(body: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Return sample name -> [(labels, value)] of a text exposition."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def by(rows: list[tuple[dict[str, str], float]], *names: str) -> dict[tuple[str, ...], float]:
    return {tuple(labels[n] for n in names): value for labels, value in rows}


def test_scrape_after_a_run_counts_what_the_worker_did(metrics_token: str) -> None:
    for i in range(4):
        services.enqueue(t.add, i, i)
    for _ in range(2):
        services.enqueue(t.boom)  # an unexpected error: failed at once
    services.enqueue(t.flaky)  # an expected error: retried 3 times, then failed
    later = services.enqueue(t.add.using(delay_s=600), 1, 1)
    assert services.cancel([(later.id, "default")]) == {later.id: "cancelled"}
    worker = async_to_sync(run_worker)(services.engine_settings())
    async_to_sync(mirror_all)()
    OutboxEntry.objects.create(job_id="not-pushed", queue="default", job={})

    response = scrape(WebClient(), metrics_token)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    got = samples(response.content)
    jobs = by(got["jobsite_jobs_total"], "queue", "task", "state")
    assert jobs == {
        ("default", "add", "completed"): 4,
        ("default", "add", "cancelled"): 1,
        ("default", "boom", "failed"): 2,
        ("default", "flaky", "failed"): 1,
    }
    assert worker.counters["completed"] == 4 and worker.counters["failed"] == 3
    assert worker.counters["retried"] == 3
    run_count = by(got["jobsite_job_run_seconds_count"], "task")
    assert run_count == {("add",): 4}
    wait_count = by(got["jobsite_job_wait_seconds_count"], "task")
    assert wait_count == {("add",): 4, ("boom",): 2, ("flaky",): 4}  # one per attempt begun
    inf = by(got["jobsite_job_run_seconds_bucket"], "task", "le")[("add", "+Inf")]
    assert inf == 4
    depth = by(got["jobsite_queue_jobs"], "queue", "state")
    assert set(depth.values()) == {0} and len(depth) == 4
    assert by(got["jobsite_queue_dlq_jobs"], "queue") == {("default",): 3}
    assert by(got["jobsite_mirror_backlog"], "queue") == {("default",): 0}
    assert by(got["jobsite_mirror_lag_seconds"], "queue") == {("default",): 0}
    # The worker's transition hooks read the stream as a group of their own: caught up.
    assert by(got["jobsite_event_group_backlog"], "queue", "group") == {("default", "hooks"): 0}
    assert by(got["jobsite_event_group_lag_seconds"], "queue", "group") == {("default", "hooks"): 0}
    assert got["jobsite_workers_alive"] == [({}, 0)]
    assert got["jobsite_outbox_size"] == [({}, 1)]
    (queue,) = async_to_sync(services.ametrics_snapshot)().queues  # the async twin agrees
    assert {(queue.queue, *k): v for k, v in queue.jobs.items()} == jobs


def test_anonymous_and_unentitled_scrapes_are_refused(metrics_token: str) -> None:
    anonymous = scrape(WebClient())
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Bearer")
    assert scrape(WebClient(), "wrong-" + metrics_token).status_code == 401
    assert scrape(WebClient(), "js_not_a_token").status_code == 401
    assert scrape(WebClient(), HTTP_AUTHORIZATION="Basic dXNlcjpwYXNz").status_code == 401

    bare = staff_user("bare")  # staff, without view_job
    web = WebClient()
    web.force_login(bare)
    assert scrape(web).status_code == 403
    assert scrape(WebClient(), make_token(bare)).status_code == 403
    plain = User.objects.create_user("plain", password="x")  # not staff
    web.force_login(plain)
    assert scrape(web).status_code == 403

    viewer = staff_user("viewer", VIEWERS)
    web.force_login(viewer)
    assert scrape(web).status_code == 200
    assert scrape(WebClient(), make_token(viewer)).status_code == 200
    assert scrape(WebClient(), metrics_token).status_code == 200
    posted = WebClient().post(reverse("jobsite:metrics"), HTTP_AUTHORIZATION=f"Bearer {SECRET}")
    assert posted.status_code == 405


def test_no_metrics_token_means_only_api_credentials(engine: EngineSettings) -> None:
    assert scrape(WebClient(), "").status_code == 401
    assert scrape(WebClient(), "anything").status_code == 401


def test_a_queue_scoped_token_sees_only_its_queues(engine: EngineSettings) -> None:
    viewer = staff_user("viewer", VIEWERS)
    response = scrape(WebClient(), make_token(viewer, queues=["elsewhere"]))
    assert response.status_code == 200
    got = samples(response.content)
    assert "jobsite_queue_jobs" not in got and got["jobsite_workers_alive"] == [({}, 0)]
    full = samples(scrape(WebClient(), make_token(staff_user("v2", VIEWERS))).content)
    assert {labels["queue"] for labels, _ in full["jobsite_queue_jobs"]} == {"default"}


def test_openmetrics_on_request(metrics_token: str) -> None:
    response = scrape(WebClient(), metrics_token, HTTP_ACCEPT="application/openmetrics-text")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.rstrip().endswith(b"# EOF")


def test_scrape_with_redis_away_answers_up_zero(metrics_token: str) -> None:
    """Nothing listens on Redis's port: a 200 with jobsite_redis_up 0 and the outbox, no 500."""
    OutboxEntry.objects.create(job_id="not-pushed", queue="default", job={})
    response = scrape(WebClient(), metrics_token)
    assert samples(response.content)["jobsite_redis_up"] == [({}, 1.0)]
    gone = {**settings.JOBSITE, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    with override_settings(JOBSITE=gone):
        conf.engine_settings.cache_clear()
        try:
            response = scrape(WebClient(), metrics_token)
        finally:
            conf.engine_settings.cache_clear()
    assert response.status_code == 200, response.content
    got = samples(response.content)
    assert got["jobsite_redis_up"] == [({}, 0.0)]
    assert got["jobsite_outbox_size"] == [({}, 1.0)]
    assert "jobsite_queue_jobs" not in got
