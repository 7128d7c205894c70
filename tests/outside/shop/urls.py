from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ops/jobs/", include("jobsite.jobs.urls")),
]
