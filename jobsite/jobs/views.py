"""Dashboard pages; live data comes over the websocket, actions over the API."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import render
from django.urls import reverse

from .models import VOCABULARY
from .permissions import Perm, user_allows
from .routing import WEBSOCKET_PATH


@staff_member_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Render the live dashboard shell, with the actions this user may take."""
    if not user_allows(request.user, Perm.VIEW):
        raise PermissionDenied(f"the dashboard needs the permission {Perm.VIEW.full}")
    config = {
        "csrf": get_token(request),
        "api": reverse("jobsite:api:api-root").rstrip("/"),
        "socket": "/" + WEBSOCKET_PATH,
        "job_page": reverse("admin:jobsite_jobrecord_change", args=["JOB_ID"]),
        "may": {p.name.lower(): user_allows(request.user, p) for p in Perm},
        "vocabulary": VOCABULARY,
    }
    context = {"config": config, "states": VOCABULARY["states"]}
    return render(request, "jobsite/dashboard.html", context)
