import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from jobsite.jobs.web.routing import websocket_application  # noqa: E402

# Static files straight from the installed apps (what the wheel shipped), as runserver does.
application = ProtocolTypeRouter(
    {"http": ASGIStaticFilesHandler(django_asgi_app), "websocket": websocket_application()}
)
