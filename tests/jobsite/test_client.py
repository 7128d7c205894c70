"""The Python client, sync and async, against the real API (in-process transports)."""

from __future__ import annotations

import threading
from urllib.parse import unquote

import httpx
import pytest
from asgiref.sync import async_to_sync

from demo.asgi import application as asgi_app
from demo.wsgi import application as wsgi_app
from engine import Client, EngineSettings, Err, JobError, JobFailed, Ok
from jobsite.client import (
    AsyncJobsiteClient,
    Conflict,
    InvalidRequest,
    JobsiteClient,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
)

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
            api.submit("ctx", "x" * (2 << 20))
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
            assert await api.outcome(job["id"], timeout_s=5, poll_s=0.05) == Ok(42)
            assert await api.result(job["id"], timeout_s=5, poll_s=0.05) == 42
            with pytest.raises(NotFound):
                await api.cancel("nobody")
            return done

    done = async_to_sync(go)()
    assert done["state"] == "completed" and done["result"] == 42


def test_outcome_gives_ok_or_err_and_result_raises(engine: EngineSettings, token: str) -> None:
    with sync_client(token) as api:
        done, failed = api.submit("add", 20, 22), api.submit("boom")
        later = api.submit("add", 1, 2, delay_s=60)
        api.cancel(later["id"])
        async_to_sync(run_worker)(engine)
        assert api.outcome(done["id"], timeout_s=5, poll_s=0.05) == Ok(42)
        assert api.result(done["id"], timeout_s=5, poll_s=0.05) == 42
        err = api.outcome(failed["id"], timeout_s=5, poll_s=0.05)
        assert err == Err(
            JobError(
                failed["id"], "failed", "ValueError", "unexpected", exception="builtins.ValueError"
            )
        )
        with pytest.raises(JobFailed, match="failed: ValueError: unexpected") as raised:
            api.result(failed["id"], timeout_s=5, poll_s=0.05)
        assert raised.value.error == err.error
        cancelled = api.outcome(later["id"], timeout_s=5, poll_s=0.05)
        assert isinstance(cancelled, Err) and cancelled.error.state == "cancelled"
        pending = api.submit("add", 1, 2, delay_s=60)
        with pytest.raises(TimeoutError):  # not ended yet: no outcome, as `wait`
            api.outcome(pending["id"], timeout_s=0.2, poll_s=0.05)


# Job ids that would leave /jobs/<id> if they were not encoded as one path segment.
TRICKY_IDS = ["../queues/default/pause?x=", "..", ".", "a/b#c", "a%2Fb"]


class RecordingWSGI(httpx.WSGITransport):
    """The real app, recording the raw path of every request."""

    def __init__(self) -> None:
        super().__init__(app=wsgi_app)
        self.paths: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.raw_path)
        return super().handle_request(request)


class RecordingASGI(httpx.ASGITransport):
    """The real app over ASGI, recording the raw path of every request."""

    def __init__(self) -> None:
        super().__init__(app=asgi_app)
        self.paths: list[bytes] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.raw_path)
        return await super().handle_async_request(request)


def assert_job_paths(paths: list[bytes]) -> None:
    """Check each path is /api/v1/jobs/<one tricky id>[/retry], with no query."""
    assert len(paths) == 3 * len(TRICKY_IDS)
    for path, job_id in zip(paths, [i for i in TRICKY_IDS for _ in range(3)], strict=True):
        _, api, version, jobs, segment, *rest = path.decode().split("/")
        assert (api, version, jobs, unquote(segment)) == ("api", "v1", "jobs", job_id), path
        assert rest in ([], ["retry"]) and "?" not in path.decode(), path


def queue_paused(engine: EngineSettings) -> bool:
    async def paused() -> bool:
        async with Client(engine) as client:
            return await client.queues.is_paused("default")

    return async_to_sync(paused)()


def test_a_job_id_stays_one_path_segment(engine: EngineSettings, token: str) -> None:
    from django.contrib.auth.models import User

    User.objects.update(is_superuser=True)  # allowed to pause: only the path stops it
    transport = RecordingWSGI()
    with JobsiteClient("http://testserver", token, transport=transport) as api:
        api.submit("add", 1, 2, delay_s=60)  # makes the queue known
        transport.paths.clear()
        for job_id in TRICKY_IDS:
            for call in (api.get, api.cancel, api.retry):
                with pytest.raises(NotFound):
                    call(job_id)
    assert_job_paths(transport.paths)
    assert not queue_paused(engine)

    async def go() -> list[bytes]:
        transport = RecordingASGI()
        async with AsyncJobsiteClient("http://testserver", token, transport=transport) as api:
            for job_id in TRICKY_IDS:
                for call in (api.get, api.cancel, api.retry):
                    with pytest.raises(NotFound):
                        await call(job_id)
        return transport.paths

    assert_job_paths(async_to_sync(go)())
    assert not queue_paused(engine)


def test_client_options_flows_and_queue_limits(engine: EngineSettings, token: str) -> None:
    from jobsite.client import flow_job

    with sync_client(token) as api:
        once = {"deduplication": {"id": "nightly", "ttl_s": 60}, "max_retries": 0}
        first = api.submit("add", 1, 2, options=once)
        assert api.submit("add", 5, 6, options=once)["id"] == first["id"]
        with pytest.raises(InvalidRequest, match="concurrency_key"):
            api.submit("add", 1, 2, options={"concurrency_limit": 2})
        flow = api.submit_flow(
            [
                flow_job("fetch", "step", "fetch"),
                flow_job("build", "step", "build", depends_on=["fetch"], options={"timeout_s": 5}),
            ],
            on_parent_failure="fail",
        )
        fetch, build = flow["jobs"]
        assert (fetch["state"], build["state"], build["parents"]) == (
            "submitted",
            "blocked",
            [fetch["id"]],
        )
        with pytest.raises(InvalidRequest, match="cycle"):
            api.submit_flow(
                [
                    flow_job("a", "step", "a", depends_on=["b"]),
                    flow_job("b", "step", "b", depends_on=["a"]),
                ]
            )
        assert api.set_queue_limits("default", "2/s", paused=True)["rate_limit"]["per_s"] == 2
        assert api.queue("default")["paused"] is True
        with pytest.raises(NotFound):
            api.queue("nope")

    async def go() -> dict[str, object]:
        transport = httpx.ASGITransport(app=asgi_app)
        async with AsyncJobsiteClient("http://testserver", token, transport=transport) as api:
            await api.set_queue_limits("default", None, paused=False)
            out = await api.submit_flow([flow_job("x", "step", "x")])
            assert out["jobs"][0]["state"] == "submitted"
            return await api.queue("default")

    queue = async_to_sync(go)()
    assert queue["rate_limit"] is None and queue["paused"] is False
    async_to_sync(run_worker)(engine)
    with sync_client(token) as api:
        assert api.get(build["id"])["result"] == {"label": "build", "saw": ["fetch"]}
