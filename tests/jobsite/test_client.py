"""The Python client, sync and async, against the real API (in-process transports)."""

from __future__ import annotations

import threading

import httpx
import pytest
from asgiref.sync import async_to_sync

from engine import EngineSettings
from jobsite.asgi import application as asgi_app
from jobsite.client import (
    AsyncJobsiteClient,
    Conflict,
    InvalidRequest,
    JobsiteClient,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
)
from jobsite.wsgi import application as wsgi_app

from .conftest import run_worker

pytestmark = pytest.mark.django_db(transaction=True)


def sync_client(token: str | None) -> JobsiteClient:
    return JobsiteClient("http://testserver", token, transport=httpx.WSGITransport(app=wsgi_app))


def test_sync_client_round_trip_and_typed_errors(engine: EngineSettings, token: str) -> None:
    with sync_client(token) as api:
        job = api.submit("progressing")
        worker = threading.Thread(target=lambda: async_to_sync(run_worker)(engine))
        seen = []
        worker.start()
        seen = [j["state"] for j in api.progress(job["id"], poll_s=0.02, timeout_s=10)]
        worker.join()
        assert seen[-1] == "completed"
        assert api.wait(job["id"], timeout_s=2)["progress"] == 100
        later = api.submit("add", 1, 2, delay_s=60, priority=3)
        assert api.cancel(later["id"])["outcome"] == "cancelled"
        assert api.retry(later["id"])["state"] == "submitted"
        with pytest.raises(Conflict):
            api.retry(job["id"])
        with pytest.raises(NotFound):
            api.get("nobody")
        with pytest.raises(InvalidRequest):
            api.submit("add", 1)
        with pytest.raises(PayloadTooLarge):
            api.submit("add", 1, "x" * (2 << 20))
        with pytest.raises(TimeoutError):
            api.wait(later["id"], timeout_s=0.2, poll_s=0.05)
    with sync_client(None) as anonymous, pytest.raises(Unauthorized):
        anonymous.get("x")


def test_async_client(engine: EngineSettings, token: str) -> None:
    async def go() -> dict[str, object]:
        transport = httpx.ASGITransport(app=asgi_app)
        async with AsyncJobsiteClient("http://testserver", token, transport=transport) as api:
            job = await api.submit("add", 20, 22)
            await run_worker(engine)
            done = await api.wait(job["id"], timeout_s=5, poll_s=0.05)
            with pytest.raises(NotFound):
                await api.cancel("nobody")
            return done

    done = async_to_sync(go)()
    assert done["state"] == "completed" and done["result"] == 42
