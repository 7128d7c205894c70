"""ASGI entry point: Django's HTTP app first, websocket routes join it with the dashboard."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402 - after Django is set up

application = ProtocolTypeRouter({"http": django_asgi_app})
