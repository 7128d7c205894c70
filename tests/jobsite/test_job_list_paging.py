"""GET /jobs a page at a time both ways: every order (duration included) walked forward then
back gives the same pages in reverse, ties in the order's key broken by id, whatever the limit;
the Jobs page that pages it, beside the job pages under the same path."""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client as WebClient
from django.urls import resolve, reverse

from jobsite.jobs.models import JobRecord
from jobsite.jobs.permissions import VIEWERS

from .conftest import make_token, staff_user

pytestmark = pytest.mark.django_db
BASE = "/api/v1/jobs"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SORTS = ["submitted_at", "started_at", "completed_at", "duration_seconds"]


def seconds(s: float) -> timedelta:
    return timedelta(seconds=s)


def make_history() -> list[JobRecord]:
    """Write 31 rows whose every key has ties: submissions 4 to an instant, durations from 5
    values, some retried (their duration is the latest attempt's), some never started."""
    rows = []
    for i in range(31):
        # ids in no relation to the times, so the id only ever breaks ties
        job_id = f"job-{(i * 7919) % 97:02d}"
        submitted = T0 + seconds(i // 4)
        row = JobRecord(id=job_id, queue="default", task="add", state="completed")
        row.submitted_at = submitted
        if i % 10 == 9:  # waiting: no start, no end
            row.state = "scheduled"
        elif i % 10 == 8:  # cancelled before it started: an end, no start, no duration
            row.state, row.completed_at = "cancelled", submitted + seconds(2)
        else:
            row.started_at = submitted + seconds(1 + (i % 3))  # ties on the start too
            run = seconds(0.25 * (i % 5))  # 5 durations, 0 among them
            if i % 6 == 0:  # retried 30 s later: the latest attempt is what counts
                row.retried_at = row.started_at + seconds(30)
                row.completed_at = row.retried_at + run
            else:
                row.completed_at = row.started_at + run
        rows.append(row)
    return JobRecord.objects.bulk_create(rows)


def key_of(field: str) -> Callable[[JobRecord], Any]:
    if field == "duration_seconds":
        return lambda r: (
            r.completed_at - (r.retried_at or r.started_at)
            if r.completed_at and (r.retried_at or r.started_at)
            else None
        )
    return lambda r: getattr(r, field)


def expected(rows: list[JobRecord], sort: str) -> list[str]:
    """Return the ids in the order `sort`, ties by id the same way, of the rows with the key."""
    key = key_of(sort.lstrip("-"))
    keyed = [(key(r), r.id) for r in rows if key(r) is not None]
    return [job_id for _, job_id in sorted(keyed, reverse=sort.startswith("-"))]


@pytest.fixture
def web() -> WebClient:
    client = WebClient()
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {make_token(staff_user('viewer', VIEWERS))}"
    return client


def get(web: WebClient, **params: Any) -> dict[str, Any]:
    response = web.get(BASE, {k: v for k, v in params.items() if v is not None})
    assert response.status_code == 200, response.content
    return response.json()  # type: ignore[no-any-return]


def ids(page: dict[str, Any]) -> list[str]:
    return [j["id"] for j in page["items"]]


@pytest.mark.parametrize("sort", [s for f in SORTS for s in (f"-{f}", f)])
def test_forward_then_back_gives_the_same_pages_in_reverse(web: WebClient, sort: str) -> None:
    rows = make_history()
    want = expected(rows, sort)
    limit = 4
    forward = [get(web, sort=sort, limit=limit)]
    assert forward[0]["prev_cursor"] is None  # the first page has nothing before it
    while forward[-1]["next_cursor"]:
        forward.append(get(web, sort=sort, limit=limit, cursor=forward[-1]["next_cursor"]))
    walked = [job_id for page in forward for job_id in ids(page)]
    assert walked == want  # every row once, in order: no duplicate, no gap across the ties
    assert all(len(ids(p)) == limit for p in forward[:-1]) and len(forward) > 3
    assert all(p["prev_cursor"] for p in forward[1:])
    # back from the last page: the same pages, newest visited first, to the first page
    back = [forward[-1]]
    while back[-1]["prev_cursor"]:
        back.append(get(web, sort=sort, limit=limit, before=back[-1]["prev_cursor"]))
    assert [ids(p) for p in back] == [ids(p) for p in reversed(forward)]
    # each page reached backwards leads forward to the page it came from
    for earlier, later in zip(back[1:], back, strict=False):
        assert ids(get(web, sort=sort, limit=limit, cursor=earlier["next_cursor"])) == ids(later)
    assert back[-1]["prev_cursor"] is None


def test_duration_sort_is_the_latest_attempts_run_time(web: WebClient) -> None:
    rows = make_history()
    page = get(web, sort="-duration_seconds", limit=500)
    durations = [j["duration_seconds"] for j in page["items"]]
    assert durations == sorted(durations, reverse=True)
    assert set(durations) == {1.0, 0.75, 0.5, 0.25, 0.0}
    # only jobs that ran and ended: the waiting and the cancelled-before-starting are left out
    assert {j["state"] for j in page["items"]} == {"completed"}
    assert len(page["items"]) == sum(1 for r in rows if r.started_at)
    # a retried job's first attempt (30 s before its retry) does not count
    retried = [j for j in page["items"] if j["retried_at"]]
    assert retried and all(j["duration_seconds"] <= 1 for j in retried)
    shortest = get(web, sort="duration_seconds", limit=3)
    assert [j["duration_seconds"] for j in shortest["items"]] == [0.0, 0.0, 0.0]
    # with a filter, still by duration
    JobRecord.objects.filter(id__in=ids(page)[:2]).update(task="other")
    mine = get(web, sort="-duration_seconds", task="other")
    assert ids(mine) == ids(page)[:2]


def test_the_duration_order_is_exact_to_the_databases_resolution(web: WebClient) -> None:
    # PostgreSQL subtracts to the microsecond; SQLite to the millisecond, the engine's resolution
    unit = timedelta(milliseconds=1) if connection.vendor == "sqlite" else timedelta(microseconds=1)
    runs = {  # id: (start, end); times without a fraction are stored without one on SQLite
        "across-a-second": (T0 + seconds(1) - unit, T0 + seconds(1) + unit),  # 2 units
        "no-fraction-start": (T0, T0 + unit),  # 1 unit
        "no-fraction-at-all": (T0, T0 + seconds(1)),
        "just-under": (T0 + unit, T0 + seconds(1)),
        "over-a-month": (T0 - seconds(40 * 86400), T0 + 5 * unit),
    }
    JobRecord.objects.bulk_create(
        JobRecord(id=i, queue="default", task="add", state="completed", submitted_at=start,
                  started_at=start, completed_at=end)
        for i, (start, end) in runs.items()
    )  # fmt: skip
    want = sorted(runs, key=lambda i: runs[i][1] - runs[i][0])
    assert want[:2] == ["no-fraction-start", "across-a-second"]
    walked, page = [], get(web, sort="duration_seconds", limit=1)
    while True:  # one row a page: every cursor holds a duration to the microsecond
        walked += ids(page)
        if not page["next_cursor"]:
            break
        page = get(web, sort="duration_seconds", limit=1, cursor=page["next_cursor"])
    assert walked == want
    back = []
    while page["prev_cursor"]:
        page = get(web, sort="duration_seconds", limit=1, before=page["prev_cursor"])
        back += ids(page)
    assert back == want[-2::-1]


def test_page_size_and_cursors_are_positions_not_page_numbers(web: WebClient) -> None:
    rows = make_history()
    want = expected(rows, "-submitted_at")
    assert ids(get(web, limit=25)) == want[:25]
    assert len(ids(get(web, limit=500))) == len(rows)
    assert ids(get(web)) == want  # 50 by default: all 31
    for limit in (0, 501):
        assert web.get(BASE, {"limit": limit}).status_code == 422
    # a cursor made at one page size serves another: the rows after (or before) its row
    first = get(web, limit=5)
    assert ids(get(web, limit=10, cursor=first["next_cursor"])) == want[5:15]
    middle = get(web, limit=10, cursor=first["next_cursor"])
    assert ids(get(web, limit=3, before=middle["prev_cursor"])) == want[2:5]
    # fewer than a page before: the rows there are, and nothing before them
    short = get(web, limit=10, before=middle["prev_cursor"])
    assert ids(short) == want[:5] and short["prev_cursor"] is None
    assert ids(get(web, limit=10, cursor=short["next_cursor"])) == want[5:15]


def cursor_of(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def test_cursors_stay_in_their_order_and_the_old_ones_still_work(web: WebClient) -> None:
    rows = make_history()
    want = expected(rows, "-submitted_at")
    row = next(r for r in rows if r.id == want[9])
    assert row.submitted_at is not None
    # a cursor as the API made it before paging went both ways: "order|time|id"
    old = cursor_of(f"-submitted_at|{row.submitted_at.isoformat()}|{row.id}")
    assert ids(get(web, limit=3, cursor=old)) == want[10:13]
    assert ids(get(web, limit=3, before=old)) == want[6:9]
    first = get(web, limit=2, sort="-duration_seconds")
    both = web.get(BASE, {"cursor": first["next_cursor"], "before": first["next_cursor"]})
    assert both.status_code == 422 and "not both" in both.json()["detail"]
    for param in ("cursor", "before"):
        foreign = web.get(BASE, {param: first["next_cursor"], "sort": "duration_seconds"})
        assert foreign.status_code == 422 and "pages the order" in foreign.json()["detail"]
        bad = web.get(
            BASE, {param: cursor_of("-duration_seconds|1.5s|x"), "sort": "-duration_seconds"}
        )
        assert bad.status_code == 422 and bad.json()["detail"] == "invalid cursor"
    assert web.get(BASE, {"sort": "-duration"}).status_code == 422


def test_the_jobs_page_and_each_jobs_page_have_their_own_urls() -> None:
    assert reverse("jobsite:jobs") == "/dashboard/jobs/"
    assert resolve("/dashboard/jobs/").url_name == "jobs"
    for job_id in ("jobs", "01a2b3", "a/b"):  # a job id never empty: always a job's page
        assert resolve(reverse("jobsite:job", args=[job_id])).url_name == "job"
    viewer = WebClient()
    viewer.force_login(staff_user("viewer", VIEWERS))
    page = viewer.get("/dashboard/jobs/")
    assert page.status_code == 200
    assert {"jobsite/jobs.html", "jobsite/joblist.html"} <= {t.name for t in page.templates}
    assert (
        b'<select name="limit">' in page.content and b'data-sort="duration_seconds"' in page.content
    )
