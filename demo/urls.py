"""URL routes of the demo project: the admin, and the Jobsite app at the root."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", RedirectView.as_view(pattern_name="jobsite:dashboard"), name="home"),
    path("", include("jobsite.jobs.urls")),
]
