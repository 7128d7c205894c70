"""URL routes of the Jobsite project."""

from django.contrib import admin
from django.urls import path

from .api import api
from .jobs.metrics import scrape
from .jobs.views import dashboard

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("dashboard/", dashboard, name="dashboard"),
    path("metrics", scrape, name="metrics"),
]
