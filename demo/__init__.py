"""The demo project `bin/run` starts: settings, URLs, ASGI/WSGI and demo jobs (not in the wheel)."""
