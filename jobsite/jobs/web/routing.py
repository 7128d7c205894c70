"""Websocket routes, and the one ASGI application a project mounts them with.

A project's asgi.py routes websockets with `websocket_application()`, or adds
`websocket_urlpatterns` to its own URLRouter (inside AuthMiddlewareStack and an origin check).
Names of Channels groups use [A-Za-z0-9._-] only.
"""

from __future__ import annotations

from typing import Any

from django.urls import path

from jobsite.jobs.web.consumers import DashboardConsumer

# Where the dashboard's socket lives; the dashboard page hands it to its script.
WEBSOCKET_PATH = "ws/jobsite/dashboard/"

websocket_urlpatterns = [path(WEBSOCKET_PATH, DashboardConsumer.as_asgi())]


def websocket_application() -> Any:
    """Return the ASGI app for the dashboard's socket: same-origin, session-authenticated."""
    from channels.auth import AuthMiddlewareStack
    from channels.routing import URLRouter

    from jobsite.jobs.web.origins import SameOriginValidator

    return SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
