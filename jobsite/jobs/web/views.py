"""Dashboard pages; live data comes over the websocket (or, where none connects, by polling
GET /api/v1/live), actions over the API."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.urls import reverse

from jobsite.jobs.models import STATE_LABELS, VOCABULARY
from jobsite.jobs.permissions import GROUPS, OPERATORS, VIEWERS, Perm, user_allows
from jobsite.jobs.services import reach
from jobsite.jobs.web.routing import WEBSOCKET_PATH

# What each group the migration made lets its members do, for the 403 page.
GROUP_WORDS = {
    VIEWERS: "see the dashboard, the history and the API (read only)",
    OPERATORS: "all of that, and submit, cancel, retry, purge, change queues and control workers",
}

# The Jobs page's choice of page sizes (GET /jobs takes at most 500 a page), and its first.
PAGE_SIZES = (25, 50, 100, 200)
PAGE_SIZE = 50


def forbidden(request: HttpRequest) -> HttpResponse:
    """Answer 403 with what gives access: the groups migrate made, the permission, the admin."""
    context = {
        "username": getattr(request.user, "get_username", lambda: "")(),
        "permission": Perm.VIEW.full,
        "groups": [(name, GROUP_WORDS.get(name, "")) for name in GROUPS],
        "admin_url": reverse("admin:index"),
    }
    return render(request, "jobsite/forbidden.html", context, status=403)


def page(request: HttpRequest, template: str, **context: Any) -> HttpResponse:
    """Render a dashboard page with the config every page's scripts read (common.js).

    The user must hold the view permission; `config.may` says which actions they may take;
    `config.redis` is Redis' state as this process last saw it (services/reach.py).
    """
    if not user_allows(request.user, Perm.VIEW):
        return forbidden(request)
    config = {
        "csrf": get_token(request),
        "api": reverse("jobsite:api:api-root").rstrip("/"),
        "socket": "/" + WEBSOCKET_PATH,
        "job_page": reverse("jobsite:job", args=["JOB_ID"]),
        "dashboard": reverse("jobsite:dashboard"),
        "may": {p.name.lower(): user_allows(request.user, p) for p in Perm},
        "vocabulary": {**VOCABULARY, "labels": STATE_LABELS},
        "redis": reach.current().shown(),
        **context.pop("config", {}),
    }
    return render(request, template, {"config": config, **context})


@staff_member_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Render the live overview: queues, workers, running jobs, failures, the history."""
    return page(request, "jobsite/dashboard.html", states=_states())


def _states() -> list[tuple[str, str]]:
    """Return each state with the word the dashboard shows for it (the list's state filter)."""
    return [(s, STATE_LABELS.get(s, s)) for s in VOCABULARY["states"]]


@staff_member_required
def jobs(request: HttpRequest) -> HttpResponse:
    """Render the history full page: filters, counts per state, sort, page size, paging."""
    return page(
        request, "jobsite/jobs.html", states=_states(), page_sizes=PAGE_SIZES, page_size=PAGE_SIZE
    )


@staff_member_required
def job(request: HttpRequest, job_id: str) -> HttpResponse:
    """Render one job's page: its state, timeline, attempts, arguments, result and logs, live."""
    return page(request, "jobsite/job.html", job_id=job_id, config={"job_id": job_id})


@staff_member_required
def schedules(request: HttpRequest) -> HttpResponse:
    """Render the schedules: next fire times, last runs, and forms to change them."""
    return page(request, "jobsite/schedules.html")


@staff_member_required
def dead_letters(request: HttpRequest) -> HttpResponse:
    """Render the dead letters grouped by error, with resubmit and purge per group."""
    return page(request, "jobsite/dead_letters.html")


@staff_member_required
def flows(request: HttpRequest) -> HttpResponse:
    """Render the newest flows with their jobs per state; each opens to its jobs."""
    return page(request, "jobsite/flows.html")


@staff_member_required
def queues(request: HttpRequest) -> HttpResponse:
    """Render the queues: counts, pause state, rate limit and concurrency keys, settable."""
    return page(request, "jobsite/queues.html")


@staff_member_required
def workers(request: HttpRequest) -> HttpResponse:
    """Render the live workers: host, pid, age, memory, outcomes, current jobs, state, and
    quiet, resume and stop for each."""
    return page(request, "jobsite/workers.html")


@staff_member_required
def roles(request: HttpRequest) -> HttpResponse:
    """Render the worker roles: their queues and the workers following each, editable."""
    return page(request, "jobsite/roles.html")
