"""POST /jobs takes rate_key and on_rate_limit: a drop or a reschedule is in the answer."""

from __future__ import annotations

from datetime import datetime

import pytest
from asgiref.sync import async_to_sync
from django.test import Client as WebClient

from engine import EngineSettings

from .conftest import run_worker
from .test_api import call

pytestmark = pytest.mark.django_db(transaction=True)


def test_submit_with_drop_answers_the_dropped_job_and_its_next_slot(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    body = {
        "task": "add",
        "args": [1, 2],
        "rate_limit": "1/m",
        "rate_key": "acct-1",
        "on_rate_limit": "drop",
    }
    first = call(web, "post", "/jobs", token, data=body)
    assert first.status_code == 201, first.content
    assert first.json()["state"] == "submitted" and first.json()["rate_limited_until"] is None
    dropped = call(web, "post", "/jobs", token, data=body).json()
    assert dropped["state"] == "cancelled" and dropped["error"] == "rate limited"
    assert datetime.fromisoformat(dropped["rate_limited_until"]) > datetime.fromisoformat(
        first.json()["submitted_at"]
    )
    other = call(web, "post", "/jobs", token, data={**body, "rate_key": "acct-2"}).json()
    assert other["state"] == "submitted"  # its own budget
    async_to_sync(run_worker)(engine)
    assert call(web, "get", f"/jobs/{dropped['id']}", token).json()["state"] == "cancelled"


def test_submit_with_reschedule_answers_when_the_job_runs(
    engine: EngineSettings, token: str
) -> None:
    web = WebClient()
    body = {
        "task": "add",
        "args": [1, 2],
        "rate_limit": "1/m",
        "rate_key": "acct-1",
        "on_rate_limit": "reschedule",
    }
    assert call(web, "post", "/jobs", token, data=body).json()["state"] == "submitted"
    moved = call(web, "post", "/jobs", token, data=body).json()
    assert moved["state"] == "scheduled"
    assert moved["rate_limited_until"] is not None
    assert moved["run_at"] == moved["rate_limited_until"]
    waiting = call(web, "get", f"/jobs/{moved['id']}", token).json()["waiting"]
    [limited] = [w for w in waiting if w["code"] == "rate_limited"]
    assert "rate key 'acct-1'" in limited["message"]


@pytest.mark.parametrize(
    ("options", "detail"),
    [
        ({"rate_limit": "1/s", "on_rate_limit": "later"}, "on_rate_limit"),
        ({"rate_key": "acct-1"}, "need a rate_limit"),
        ({"on_rate_limit": "drop"}, "need a rate_limit"),
        ({"rate_limit": "1/s", "rate_key": ""}, "rate_key"),
    ],
)
def test_bad_rate_key_options_are_a_422(
    engine: EngineSettings, token: str, options: dict[str, str], detail: str
) -> None:
    answer = call(
        WebClient(), "post", "/jobs", token, data={"task": "add", "args": [1, 2], **options}
    )
    assert answer.status_code == 422, answer.content
    assert detail in str(answer.json()["detail"])
