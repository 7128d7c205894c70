"""Why a job waits, through the API and the Python client: reasons in order, each with a link."""

from __future__ import annotations

import httpx
import pytest
from asgiref.sync import async_to_sync

from demo.wsgi import application as wsgi_app
from engine import Client, EngineSettings
from jobsite.client import JobsiteClient

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_waiting_job_says_why_through_the_api_and_the_client(
    engine: EngineSettings, token: str
) -> None:
    async def pause(client: Client) -> None:
        await client.queues.pause("default")

    async def call() -> None:
        async with Client(engine) as client:
            await pause(client)

    async_to_sync(call)()
    with JobsiteClient(
        "http://testserver", token, transport=httpx.WSGITransport(app=wsgi_app)
    ) as api:
        job = api.submit("add", 1, 2)
        reasons = api.why(job["id"])
        assert [r["code"] for r in reasons] == ["paused", "no_worker"]
        assert reasons[0]["link"] == "/dashboard/queues/#queue-default"
        assert reasons[1]["link"] == "/dashboard/workers/"
        assert "no live worker serves queue 'default'" in reasons[1]["message"]
        later = api.submit("add", 1, 2, delay_s=600, queue="default")
        codes = [r["code"] for r in api.get(later["id"])["waiting"]]
        assert codes == ["paused", "scheduled", "no_worker"]
        api.cancel(later["id"])
        assert api.why(later["id"]) == []  # ended: nothing to explain
