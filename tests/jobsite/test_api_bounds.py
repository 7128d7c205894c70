"""Bounds on what callers may set or ask: a queue's rate limit, the depth of /scheduled."""

from __future__ import annotations

import pytest
from django.test import Client as WebClient

from engine import EngineSettings

from .test_api import call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("rate", ["1/999999999s", "1/2d", "1/infs", "inf/s", "2000000/s"])
def test_a_rate_limit_slower_than_a_start_a_day_or_absurdly_fast_is_a_422(
    engine: EngineSettings, token: str, rate: str
) -> None:
    web = WebClient()
    daily = call(web, "put", "/queues/default/limits", token, data={"rate_limit": "1/d"})
    assert daily.status_code == 200, daily.content
    answer = call(web, "put", "/queues/default/limits", token, data={"rate_limit": rate})
    assert answer.status_code == 422, answer.content
    assert "one start a day to 1,000,000 starts a second" in answer.json()["detail"]
    assert rate in answer.json()["detail"]
    kept = call(web, "get", "/queues/default", token).json()["rate_limit"]
    assert kept == {"interval_ms": 86_400_000.0, "per_s": round(1 / 86_400, 6)}  # nothing set


def test_scheduled_pages_stop_at_an_offset_of_10000(engine: EngineSettings, token: str) -> None:
    web = WebClient()
    assert call(web, "get", "/scheduled?offset=10000", token).status_code == 200
    deep = call(web, "get", "/scheduled?offset=10001", token)
    assert deep.status_code == 422 and "offset" in str(deep.json()["detail"])
