"""Websockets from this site only: the Origin must be exactly the page's own scheme://host:port.

The same rule Django's CSRF check applies to form posts: the Origin header equals the scheme and
Host of the request (Host in ALLOWED_HOSTS), or is listed in CSRF_TRUSTED_ORIGINS. Another app on
the same host name but another port, or another scheme, is refused.
"""

from __future__ import annotations

from typing import Any

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host


def _scheme(scope: dict[str, Any], headers: dict[bytes, bytes]) -> str:
    """Return the page scheme (http/https) the socket was opened from."""
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        name = proxy[0].removeprefix("HTTP_").replace("_", "-").lower().encode()
        if headers.get(name, b"").decode("latin1") == proxy[1]:
            return "https"
    return "https" if scope.get("scheme") == "wss" else "http"


def same_origin(scope: dict[str, Any]) -> bool:
    """Tell whether a websocket scope comes from this site's own origin."""
    headers = dict(scope.get("headers", []))
    origin = headers.get(b"origin", b"").decode("latin1")
    host = headers.get(b"host", b"").decode("latin1")
    if not origin:
        return False
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    domain, _ = split_domain_port(host)
    allowed_hosts = settings.ALLOWED_HOSTS or (["localhost", "127.0.0.1"] if settings.DEBUG else [])
    return (
        bool(domain)
        and validate_host(domain, allowed_hosts)
        and origin == f"{_scheme(scope, headers)}://{host}"
    )


class SameOriginValidator:
    """ASGI middleware: pass a websocket on only when `same_origin` holds, deny it otherwise."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if same_origin(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
