"""API tokens: made once, shown once, stored as a SHA-256, revocable."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja.security import HttpBearer, SessionAuthIsStaff

from .models import ApiToken


def digest(key: str) -> str:
    """Return the stored form of a token."""
    return hashlib.sha256(key.encode()).hexdigest()


def issue(token: ApiToken) -> str:
    """Fill a new token's prefix and hash; return the key (the only time it is seen)."""
    key = "js_" + secrets.token_urlsafe(30)
    token.prefix = key[:8]
    token.key_hash = digest(key)
    return key


class TokenAuth(HttpBearer):
    """`Authorization: Bearer js_...`: a token not revoked, of an active staff user."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        row = (
            ApiToken.objects.select_related("user")
            .filter(key_hash=digest(token), revoked_at__isnull=True)
            .first()
        )
        if row is None or not (row.user.is_active and row.user.is_staff):
            return None
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=timezone.now())
        request.user = row.user
        return row.user


class StaffSession(SessionAuthIsStaff):
    """A logged-in staff user's session; CSRF is checked on unsafe methods.

    Without a staff session the answer is 401 (no credentials), whatever cookie came along;
    with one, a missing CSRF token is a 403.
    """

    def __call__(self, request: HttpRequest) -> Any:
        user = getattr(request, "user", None)
        if user is None or not (user.is_authenticated and user.is_staff):
            return None
        return super().__call__(request)


# A bearer token, or a staff session.
AUTH = [TokenAuth(), StaffSession()]
