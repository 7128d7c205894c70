"""The app's URLs: a project mounts them with `path("jobs/", include("jobsite.jobs.urls"))`.

The dashboard is under `dashboard/`, the JSON API under `api/v1/` (its docs at `api/v1/docs`),
Prometheus metrics at `metrics`, probes at `healthz` and `readyz` (engine/probe.py's twins
for the web app).
Reverse them as `jobsite:dashboard` and `jobsite:api:<name>`.
"""

from django.urls import path

from .apiroot import api
from .metrics import scrape
from .probes import healthz, readyz
from .views import dashboard, dead_letters, job, queues, schedules

app_name = "jobsite"

urlpatterns = [
    path("dashboard/", dashboard, name="dashboard"),
    path("dashboard/jobs/<path:job_id>/", job, name="job"),
    path("dashboard/schedules/", schedules, name="schedules"),
    path("dashboard/dead-letters/", dead_letters, name="dead_letters"),
    path("dashboard/queues/", queues, name="queues"),
    path("api/v1/", api.urls),
    path("metrics", scrape, name="metrics"),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
]
