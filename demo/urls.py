"""URL routes of the demo project: the admin, and the Jobsite app at the root."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", RedirectView.as_view(pattern_name="jobsite:dashboard"), name="home"),
    # Browsers ask for /favicon.ico on pages without an icon link (the admin's).
    path("favicon.ico", RedirectView.as_view(url=static("jobsite/favicon.svg"), permanent=True)),
    path("", include("jobsite.jobs.urls")),
]
