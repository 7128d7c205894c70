"""Error reports without secrets: Redis and channel-layer URLs have their passwords hidden.

In the settings and request headers of a report, and in the local variables of its frames
(a bad JOBSITE setting fails where the URL sits in `values` and `kwargs`).
"""

from __future__ import annotations

import re
from collections.abc import ItemsView
from pprint import pformat
from typing import Any

from django.views.debug import SafeExceptionReporterFilter

from engine import redact_url

# Anything that looks like a URL with a scheme (redis://, rediss://, unix://, postgres://...).
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
# The same inside a longer text (a repr): up to a blank or a quote.
_URL_IN_TEXT = re.compile(r"[a-z][a-z0-9+.-]*://[^\s'\"<>]*", re.IGNORECASE)


class _Shown:
    """A frame variable shown as its redacted repr (the report pformats what it gets)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _redacted_variable(value: Any) -> Any:
    """Return `value`, or its repr with the secrets of every URL in it hidden if it has any."""
    try:
        text = pformat(value)
    except Exception:
        return value  # the report says it could not format it; nothing of it is shown
    redacted = _URL_IN_TEXT.sub(lambda m: redact_url(m.group()), text)
    return value if redacted == text else _Shown(redacted)


class RedactingFilter(SafeExceptionReporterFilter):
    """Django's filter, plus: every URL-like string in settings shown with its secrets hidden."""

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        cleansed = super().cleanse_setting(key, value)
        # Dicts, lists and tuples come back here item by item (Django's recursion).
        if isinstance(cleansed, str) and _URL.match(cleansed):
            return redact_url(cleansed)
        return cleansed

    def get_traceback_frame_variables(self, request: Any, tb_frame: Any) -> ItemsView[str, Any]:
        variables = super().get_traceback_frame_variables(request, tb_frame)
        return {name: _redacted_variable(value) for name, value in variables}.items()
