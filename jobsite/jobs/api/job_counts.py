"""The job counts resource (/job-counts): the history's jobs per state under the list's filters."""

from __future__ import annotations

from django.db.models import Count
from django.http import HttpRequest
from ninja import Query, Router

from jobsite.jobs.api.jobs import JobFilters
from jobsite.jobs.api.schemas import ERRORS, JobCountsOut

router = Router(tags=["jobs"])


@router.get("", response={200: JobCountsOut, **ERRORS})
def count_jobs(request: HttpRequest, filters: Query[JobFilters]) -> JobCountsOut:
    """Count the history's jobs per state under the list's filters (all but the state)."""
    rows = filters.rows(request)
    per_state = dict(rows.order_by().values_list("state").annotate(n=Count("id")))
    return JobCountsOut(total=sum(per_state.values()), states=per_state)
