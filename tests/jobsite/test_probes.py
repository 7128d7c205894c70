"""/healthz and /readyz: anonymous, no secrets, 503 naming what is down (database, Redis)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connections
from django.test import Client as HttpClient
from django.test import override_settings

from engine import EngineSettings
from jobsite.jobs import conf

from ..faultproxy import FaultProxy

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def database_down() -> Iterator[None]:
    """Point new connections of the default database at nothing (a closed port, a missing
    directory): what the app sees when its database server is gone."""
    db = connections.settings["default"]
    saved = {k: db.get(k) for k in ("NAME", "PORT", "HOST")}
    if db["ENGINE"].endswith("sqlite3"):
        db["NAME"] = "/nonexistent-jobsite-dir/db.sqlite3"
    else:
        db["HOST"], db["PORT"] = "127.0.0.1", "1"
    try:
        yield
    finally:
        db.update(saved)


def test_healthz_answers_anyone() -> None:
    answer = HttpClient().get("/healthz")
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}
    assert HttpClient().post("/healthz").status_code == 405


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_answer_405_to_other_methods_not_the_csrf_page(path: str) -> None:
    web = HttpClient(enforce_csrf_checks=True)  # as a real client: no CSRF token
    for method in ("post", "put", "patch", "delete"):
        answer = getattr(web, method)(path)
        assert answer.status_code == 405, (method, answer.status_code)
        assert answer["Allow"] == "GET, HEAD"
    assert web.head(path).status_code in (200, 503)


def test_readyz_when_all_answers(engine: EngineSettings) -> None:
    answer = HttpClient().get("/readyz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok", "database": "ok", "redis": "ok"}


def test_readyz_with_the_database_down(engine: EngineSettings) -> None:
    with database_down():
        answer = HttpClient().get("/readyz")
    assert answer.status_code == 503
    body = answer.json()
    assert body["redis"] == "ok" and body["database"].startswith("error: ")
    assert "nonexistent" not in answer.content.decode()  # no path, host or message leaks
    assert HttpClient().get("/readyz").status_code == 200  # back once it is


def test_readyz_with_redis_blackholed(engine: EngineSettings) -> None:
    port = int(engine.redis_url.rsplit(":", 1)[1].split("/")[0])
    with FaultProxy(port) as proxy:
        values = {"REDIS_URL": proxy.url(), "TASK_MODULES": [], "QUEUES": ["default"]}
        with override_settings(JOBSITE=values):
            conf.engine_settings.cache_clear()
            assert HttpClient().get("/readyz").status_code == 200
            proxy.blackholed.set()
            proxy.reset_all()
            answer = HttpClient().get("/readyz")
            body = answer.json()
            assert answer.status_code == 503, body
            assert body["database"] == "ok"
            assert body["redis"] in ("timeout", "error: RedisUnavailable")
            assert str(proxy.port) not in answer.content.decode()
        conf.engine_settings.cache_clear()
