"""The app's URLs: a project mounts them with `path("jobs/", include("jobsite.jobs.urls"))`.

The dashboard is under `dashboard/`, the JSON API under `api/v1/` (its docs at `api/v1/docs`),
Prometheus metrics at `metrics`, probes at `healthz` and `readyz` (engine/ops/probe.py's twins
for the web app).
Reverse them as `jobsite:dashboard` and `jobsite:api:<name>`.
"""

from django.http import HttpRequest, JsonResponse
from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt

from jobsite.jobs.api.root import api
from jobsite.jobs.web.metrics import scrape
from jobsite.jobs.web.probes import healthz, readyz
from jobsite.jobs.web.views import (
    dashboard,
    dead_letters,
    flows,
    job,
    jobs,
    queues,
    roles,
    schedules,
    workers,
)

app_name = "jobsite"


@csrf_exempt  # it changes nothing, whatever the method
def api_not_found(request: HttpRequest, rest: str) -> JsonResponse:
    """Answer a path under the API that no operation takes (an encoded slash in an id, say)
    as the API answers everything: JSON."""
    return JsonResponse({"detail": f"no API operation at {request.path!r}"}, status=404)


urlpatterns = [
    path("dashboard/", dashboard, name="dashboard"),
    # The whole history; a job's page is below it (an id is never empty, so they never clash).
    path("dashboard/jobs/", jobs, name="jobs"),
    path("dashboard/jobs/<path:job_id>/", job, name="job"),
    path("dashboard/schedules/", schedules, name="schedules"),
    path("dashboard/dead-letters/", dead_letters, name="dead_letters"),
    path("dashboard/flows/", flows, name="flows"),
    path("dashboard/queues/", queues, name="queues"),
    path("dashboard/roles/", roles, name="roles"),
    path("dashboard/workers/", workers, name="workers"),
    path("api/v1/", api.urls),
    re_path(r"^api/v1/(?P<rest>.*)$", api_not_found),
    path("metrics", scrape, name="metrics"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
]
