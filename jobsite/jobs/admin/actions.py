"""The admin's job actions (cancel, retry, resubmit, purge): a confirmation page with the count
and what is left alone, why; then the API's way of changing many jobs (api/bulk_change.py), its
step per chunk or, past JOBSITE["BULK_MAX"] with "select all N", its background run over the
list's filter; the audit, and what happened in the operator's words.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from asgiref.sync import async_to_sync
from django.contrib import admin, messages
from django.contrib.admin.views.main import ALL_VAR, ORDER_VAR, PAGE_VAR, SEARCH_VAR
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from engine import RedisUnavailable
from jobsite.jobs import audit
from jobsite.jobs.admin.pages import page_context, refused
from jobsite.jobs.api.bulk_change import CHUNK, STATES, STEPS, begin
from jobsite.jobs.conf import bulk_max
from jobsite.jobs.models import LOST, STATE_LABELS, VOCABULARY, JobRecord

# What each job action does, in the words of its message: "2 jobs were not <this>: ...".
DONE = {"cancel": "cancelled", "retry": "retried", "resubmit": "resubmitted", "purge": "purged"}


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def _said(n: int, one: str, several: str) -> str:
    return one if n == 1 else several


def _not_done(n: int, verb: str, why: tuple[str, str]) -> str:
    """Return "1 job was not retried: it ..." or "2 jobs were not retried: they ..."."""
    return f"{_jobs(n)} {_said(n, 'was', 'were')} not {DONE[verb]}: {_said(n, *why)}"


def _why(state: str, verb: str) -> tuple[str, str]:
    """Return why `verb` leaves a job of `state` (as the history last saw it) alone: for one
    job, for several."""
    word = STATE_LABELS.get(state, state)
    if state in VOCABULARY["live"]:
        return f"it is still {word}", f"they are still {word}"
    if state == LOST:
        return "Redis no longer holds it", "Redis no longer holds them"
    if verb == "resubmit":
        return f"it is no dead letter ({word})", f"they are no dead letters ({word})"
    return f"it already ended ({word})", f"they already ended ({word})"


def _left_alone(queryset: QuerySet[JobRecord], states: Sequence[str]) -> list[tuple[int, str]]:
    """Return the selected jobs `states` leaves out: (how many, state), the most first."""
    rows = queryset.exclude(state__in=states).values("state").annotate(n=Count("pk")).order_by()
    return sorted(((row["n"], row["state"]) for row in rows), reverse=True)


# Why jobs a step neither changed nor skipped with a reason were left: for one job, for several.
MISSED = (
    "it changed meanwhile, or Redis no longer holds it",
    "they changed meanwhile, or Redis no longer holds them",
)


def _outcome(
    verb: str, changed: int, skipped: dict[str, int], sent: int
) -> tuple[list[str], list[str]]:
    """Return what the step did to the `sent` jobs, in words: (done, not done)."""
    if verb == "purge":  # the history's rows go whatever Redis still held
        return [f"{_jobs(sent)} purged"], []
    said = "cancelled" if verb == "cancel" else "queued to run again"
    done = [f"{_jobs(changed)} {said}"] if changed else []
    not_done = [_not_done(n, verb, (why, why)) for why, n in skipped.items() if n]
    if (missed := sent - changed - sum(skipped.values())) > 0:
        not_done.append(_not_done(missed, verb, MISSED))
    return done, not_done


def _apply(verb: str, pairs: list[tuple[str, str]]) -> tuple[int, dict[str, int]]:
    """Change `pairs` by the API's step for `verb`, a chunk at a time; return how many
    changed, and the others by reason."""
    step = async_to_sync(STEPS[verb])
    changed, skipped = 0, Counter[str]()
    for start in range(0, len(pairs), CHUNK):
        n, why = step(pairs[start : start + CHUNK])
        changed += n
        skipped.update(why)
    return changed, dict(skipped)


# The list's filters a background run can repeat, as the selector names them.
RUN_FILTERS = {
    "state__exact": "state",
    "queue": "queue",
    "task": "task",
    SEARCH_VAR: "q",
    "submitted_at__gte": "since",
    "submitted_at__lt": "before",
}
# Parameters of the list that choose no rows (page, order, facets, "show all").
LIST_ONLY = {PAGE_VAR, ORDER_VAR, ALL_VAR, "_facets"}


def _selector(request: HttpRequest) -> dict[str, str] | None:
    """Return the list's filter as a bulk run's selector; None when it filters by something a
    run cannot repeat."""
    chosen: dict[str, str] = {}
    for key in request.GET:
        name, value = RUN_FILTERS.get(key), request.GET.get(key) or ""
        if key in LIST_ONLY or not value.strip():
            continue
        if name is None:
            return None
        if name in ("since", "before"):
            try:
                at = datetime.fromisoformat(value)
            except ValueError:
                return None
            value = (timezone.make_aware(at) if timezone.is_naive(at) else at).isoformat()
        chosen[name] = value
    return chosen


def _in_background(
    modeladmin: admin.ModelAdmin[JobRecord], request: HttpRequest, verb: str, count: int
) -> None:
    """Start the API's background run of `verb` over the list's filter; say where to see it."""
    selector = _selector(request)
    if selector is None:
        modeladmin.message_user(
            request,
            f"{_jobs(count)}: more than one request changes ({bulk_max()}, "
            "JOBSITE['BULK_MAX']), and a background run repeats only the filters by state, "
            "queue, task and submitted date and the search: nothing was changed",
            messages.ERROR,
        )
        return
    audit.record_bulk(request.user, verb, selector, count, "admin")
    run = begin(verb, selector, count, None, request.user, "admin")
    url = f"{reverse('jobsite:api:api-root').rstrip('/')}/bulk/runs/{run.pk}"
    said = '{}: running in the background, see <a href="{}">bulk run {}</a> for its progress'
    modeladmin.message_user(request, format_html(said, _jobs(count), url, run.pk))


def confirm(
    modeladmin: admin.ModelAdmin[JobRecord],
    request: HttpRequest,
    queryset: QuerySet[JobRecord],
    verb: str,
) -> HttpResponse | None:
    """Show a confirmation page with the count and what is left alone, why; on "yes", change
    the jobs as the API does (past JOBSITE["BULK_MAX"] with "select all", in the background),
    audit it and say what happened."""
    states = STATES[verb]
    eligible = queryset.filter(state__in=states)
    count = eligible.count()
    select_across = request.POST.get("select_across") == "1"
    background = select_across and count > bulk_max()
    left = _left_alone(queryset, states)
    if request.POST.get("post") != "yes":
        context = page_context(
            modeladmin,
            request,
            f"{verb.capitalize()} jobs",
            verb=verb,
            count=count,
            background=background,
            left=[f"{_jobs(n)}: {_said(n, *_why(state, verb))}" for n, state in left],
            queryset=queryset,
            action=request.POST.get("action", ""),
            select_across=select_across,
        )
        return TemplateResponse(request, "admin/jobsite/confirm_action.html", context)
    if background:
        _in_background(modeladmin, request, verb, count)
        return None
    pairs = list(eligible.values_list("id", "queue"))
    try:
        changed, skipped = _apply(verb, pairs)
    except RedisUnavailable as exc:
        refused(request, exc, f"the {verb} stopped, maybe part-way: try again once it answers")
        return None
    if select_across:
        selector = {k: v for k, v in request.GET.items() if k not in ("p", "o")}
        audit.record_bulk(request.user, verb, selector, len(pairs), "admin")
    else:
        outcome = {"changed": changed, "skipped": skipped}
        audit.record(request.user, verb, [i for i, _ in pairs], "admin", outcome=outcome)
    done, not_done = _outcome(verb, changed, skipped, len(pairs))
    not_done += [_not_done(n, verb, _why(state, verb)) for n, state in left]
    if done or not not_done:
        modeladmin.message_user(request, "; ".join(done) or "no job changed", messages.SUCCESS)
    for line in not_done:
        modeladmin.message_user(request, line, messages.WARNING)
    return None
