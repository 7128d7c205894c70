"""Websocket routes (names of Channels groups use [A-Za-z0-9._-] only)."""

from django.urls import path

from .consumers import DashboardConsumer

websocket_urlpatterns = [path("ws/dashboard/", DashboardConsumer.as_asgi())]
