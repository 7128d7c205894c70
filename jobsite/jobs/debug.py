"""Error reports without secrets: Redis and channel-layer URLs have their passwords hidden."""

from __future__ import annotations

import re
from typing import Any

from django.views.debug import SafeExceptionReporterFilter

from engine import redact_url

# Anything that looks like a URL with a scheme (redis://, rediss://, unix://, postgres://...).
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


class RedactingFilter(SafeExceptionReporterFilter):
    """Django's filter, plus: every URL-like string in settings shown with its secrets hidden."""

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        cleansed = super().cleanse_setting(key, value)
        # Dicts, lists and tuples come back here item by item (Django's recursion).
        if isinstance(cleansed, str) and _URL.match(cleansed):
            return redact_url(cleansed)
        return cleansed
