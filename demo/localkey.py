"""The demo project's local secret key: made once in var/secret_key (mode 0600), then reused.

Only `bin/run` and the repository's `manage.py` use it, and say so; production sets
DJANGO_SECRET_KEY, and the ASGI/WSGI entry points refuse to start without one (DEBUG off).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def local_secret_key(path: Path) -> str:
    """Return the key kept in `path`, making it first if there is none (or an empty file)."""
    key = path.read_text().strip() if path.exists() else ""
    if not key:  # none yet, or an empty file left by a run stopped while writing it
        key = secrets.token_urlsafe(50)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole under another name, then renamed: never seen half-written.
        part = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(key)
        os.replace(part, path)
    return key
