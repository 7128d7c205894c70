"""API tokens: made once, shown once, stored as a SHA-256, scoped, expiring, revocable."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone
from ninja.security import HttpBearer
from ninja.security.session import SessionAuthIsStaff

from jobsite.jobs.models import ApiToken
from jobsite.jobs.permissions import Grant

# `last_used_at` is written at most this often per token: a write per request would compete
# with the mirror for SQLite's single writer.
TOUCH_EVERY = timedelta(seconds=60)


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
    """`Authorization: Bearer js_...`: a live token (not revoked, not expired) of active staff."""

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        now = timezone.now()
        row = (
            ApiToken.objects.select_related("user")
            .filter(key_hash=digest(token), revoked_at__isnull=True)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            .first()
        )
        if row is None or not (row.user.is_active and row.user.is_staff):
            return None
        if row.last_used_at is None or now - row.last_used_at > TOUCH_EVERY:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        request.user = row.user
        return Grant(row.user, row)


class StaffSession(SessionAuthIsStaff):
    """A logged-in staff user's session; CSRF is checked on unsafe methods.

    Without a staff session the answer is 401 (no credentials), whatever cookie came along;
    with one, a missing CSRF token is a 403.
    """

    def __call__(self, request: HttpRequest) -> Any:
        user = getattr(request, "user", None)
        if user is None or not (user.is_authenticated and user.is_active and user.is_staff):
            return None
        return Grant(user) if super().__call__(request) else None


# A bearer token, or a staff session.
AUTH = [TokenAuth(), StaffSession()]
