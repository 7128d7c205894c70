"""Why a job waits, for the API and the job page: the engine's reasons with a link to each fix.

A queue's reasons (paused, rate limited) link to the queues page, where both are changed; a
job's (concurrency key holders, parents, run_at, deadline) to those jobs' pages; a missing
worker to the Workers page.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from django.urls import reverse

from engine import Reason


def _link(reason: Reason, queue: str) -> str:
    if reason.target == "queue":
        return f"{reverse('jobsite:queues')}#queue-{quote(queue)}"
    if reason.target == "workers":
        return reverse("jobsite:workers")
    return reverse("jobsite:job", args=[reason.jobs[0]]) if reason.jobs else ""


def reasons_out(reasons: list[Reason], queue: str) -> list[dict[str, Any]]:
    """Return each reason as JSON-ready values with `link` (where to change it) and `links` (a
    page per job it names)."""
    return [
        reason.as_dict()
        | {
            "link": _link(reason, queue),
            "links": [reverse("jobsite:job", args=[j]) for j in reason.jobs],
        }
        for reason in reasons
    ]
