"""The demo project's own tests, written the way a user writes theirs: with jobsite.testing.

Unit tests run the demo's tasks inline (`jobsite_eager`); integration tests enqueue them on a
private Redis (`jobsite_redis`) and drain the queues with `run_jobs()`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings

from demo import demo_tasks
from jobsite.jobs import services
from jobsite.testing import assert_enqueued, enqueued_jobs, run_jobs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def demo_modules() -> Iterator[None]:
    with override_settings(JOBSITE={**settings.JOBSITE, "TASK_MODULES": ["demo.demo_tasks"]}):
        yield


@pytest.fixture
def eager() -> Iterator[None]:
    # After demo_modules, so that the eager setting is layered on the demo's task modules.
    with override_settings(JOBSITE={**settings.JOBSITE, "EAGER": True}):
        yield


def test_resize_and_crunch_return_their_results_inline(demo_modules: None, eager: None) -> None:
    assert services.enqueue(demo_tasks.resize_image, 7, 640).result == {
        "image_id": 7,
        "width": 640,
    }
    assert services.enqueue(demo_tasks.crunch_numbers, 10).result == 285


def test_a_declined_card_fails_with_its_reason(demo_modules: None, eager: None) -> None:
    job = services.enqueue(demo_tasks.charge_card, 1999)
    assert job.state == "failed"
    assert "card declined for 1999 cents" in job.errors[-1]["message"]


def test_retries_and_polls_run_to_completion_on_a_real_redis(jobsite_redis: object) -> None:
    email = services.enqueue(demo_tasks.send_email, "ada@example.com")
    poll = services.enqueue(demo_tasks.poll_upstream)
    assert_enqueued(demo_tasks.send_email, "ada@example.com")
    assert {j.id for j in enqueued_jobs()} == {email.id, poll.id}
    counts = run_jobs()
    assert counts["completed"] == 2
    assert enqueued_jobs() == []
    done = services.run_engine(lambda client: client.jobs.get(email.id))
    assert (done.state, done.attempt, done.result) == ("completed", 3, "sent to ada@example.com")
