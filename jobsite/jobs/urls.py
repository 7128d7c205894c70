"""The app's URLs: a project mounts them with `path("jobs/", include("jobsite.jobs.urls"))`.

The dashboard is under `dashboard/`, the JSON API under `api/v1/` (its docs at `api/v1/docs`),
Prometheus metrics at `metrics`.
Reverse them as `jobsite:dashboard` and `jobsite:api:<name>`.
"""

from django.urls import path

from jobsite.jobs.api.root import api
from jobsite.jobs.web.metrics import scrape
from jobsite.jobs.web.views import dashboard, dead_letters, job, queues, schedules

app_name = "jobsite"

urlpatterns = [
    path("dashboard/", dashboard, name="dashboard"),
    path("dashboard/jobs/<path:job_id>/", job, name="job"),
    path("dashboard/schedules/", schedules, name="schedules"),
    path("dashboard/dead-letters/", dead_letters, name="dead_letters"),
    path("dashboard/queues/", queues, name="queues"),
    path("api/v1/", api.urls),
    path("metrics", scrape, name="metrics"),
]
