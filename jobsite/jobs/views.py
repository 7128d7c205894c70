"""Dashboard pages (staff only); live data comes over the websocket, actions over the API."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie


@staff_member_required
@ensure_csrf_cookie
def dashboard(request: HttpRequest) -> HttpResponse:
    """Render the live dashboard shell."""
    return render(request, "dashboard/index.html")
