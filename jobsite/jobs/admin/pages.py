"""What the app's own admin pages share: one time format, the admin's breadcrumb, and a word
when Redis does not answer.

Pages that read Redis (schedules, roles) or act through it (queues, workers, jobs) say so, from
services/reach.py alone, instead of failing or listing nothing.
"""

from __future__ import annotations

import contextlib
import functools
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import get_template
from django.urls import reverse
from django.utils import dateformat, timezone

from engine import RedisUnavailable
from jobsite.jobs import services
from jobsite.jobs.services import reach

# Every time of a job, in the list, its page and its timeline, in one format: Django's TIME_ZONE,
# to the second, the zone named (Django's own format names none and drops the seconds, and the
# timeline's transitions came out in UTC whatever TIME_ZONE says).
TIME_FORMAT = "Y-m-d H:i:s T"


def when(value: datetime | None) -> str | None:
    """Return an aware datetime in the current time zone as TIME_FORMAT; None (Django's "-")
    for none."""
    return None if value is None else dateformat.format(timezone.localtime(value), TIME_FORMAT)


@functools.cache
def crumbs_as_list() -> bool:
    """Tell whether the admin's base template draws its breadcrumb as a list (`<ol>`, as 6.1
    does) rather than a line (`<div>`, as 5.2 does): the app's pages draw theirs the same way."""
    source = getattr(get_template("admin/base.html"), "template", None)
    return '<ol class="breadcrumbs">' in getattr(source, "source", "")


def page_context(
    modeladmin: admin.ModelAdmin[Any],
    request: HttpRequest,
    title: str,
    *trail: tuple[str, str],
    the_list: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """Return the context of one of the app's admin pages: the admin's own, and the breadcrumb
    Home > app > the model's list (unless this is `the_list`) > each (url, label) of `trail` >
    `title`."""
    opts = modeladmin.opts
    app = reverse("admin:app_list", kwargs={"app_label": opts.app_label})
    listed = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    crumbs = [(reverse("admin:index"), "Home"), (app, str(opts.app_config.verbose_name))]
    if not the_list:
        crumbs.append((listed, str(opts.verbose_name_plural).capitalize()))
    crumbs += trail
    return {
        **modeladmin.admin_site.each_context(request),
        "opts": opts,
        "title": title,
        "crumbs": crumbs,
        "crumbs_as_list": crumbs_as_list(),
        **extra,
    }


def redis_down(request: HttpRequest, meanwhile: str, level: int = messages.WARNING) -> bool:
    """Add "Redis does not answer" and `meanwhile` to the page's messages when Redis does not
    answer, as this process last saw it; return whether it does not."""
    state = reach.current()
    if state.up:
        return False
    since = when(datetime.fromtimestamp(state.since_ms / 1000, UTC))
    messages.add_message(request, level, f"Redis does not answer (since {since}): {meanwhile}")
    return True


def look(request: HttpRequest, meanwhile: str) -> bool:
    """Ask Redis whether it answers (within the client's timeout, noted in services/reach.py),
    then say so as `redis_down` does; return whether it does not."""
    with contextlib.suppress(RedisUnavailable):  # (noted by the call itself)
        services.run_engine(lambda client: client.ping())
    return redis_down(request, meanwhile)


def refused(request: HttpRequest, exc: RedisUnavailable, meanwhile: str) -> None:
    """Say why an action through Redis did not run: it does not answer, or it takes no writes
    for now (out of memory, a replica: it still answers)."""
    if not redis_down(request, meanwhile, messages.ERROR):
        messages.error(request, f"Redis refused it ({exc}): {meanwhile}")


class NeedsRedis(admin.ModelAdmin):
    """A list of rows copied from Redis whose actions go through it: the list says when Redis
    does not answer, an action it could not take says so (no error page)."""

    meanwhile = "the rows below are as last copied from it; actions wait until it answers again"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Show the list, saying first whether Redis answers; an action it refused redirects
        back with why."""
        if request.method != "POST":
            look(request, self.meanwhile)
        try:
            return super().changelist_view(request, extra_context)
        except RedisUnavailable as exc:
            refused(request, exc, "the action may not have been done: try again once it answers")
            return HttpResponseRedirect(request.get_full_path())
