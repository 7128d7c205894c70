#!/usr/bin/env python
"""Django's command-line utility for the Jobsite project."""

import os
import sys
from pathlib import Path


def main() -> None:
    """Run a management command (the demo project's: a local secret key unless one is set)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo.settings")
    if not os.environ.get("DJANGO_SECRET_KEY") and os.environ.get("DJANGO_DEBUG") != "1":
        from demo.localkey import local_secret_key

        path = Path(__file__).resolve().parent / "var" / "secret_key"
        os.environ["DJANGO_SECRET_KEY"] = local_secret_key(path)
        print(
            f"manage.py: local secret key from {path} (set DJANGO_SECRET_KEY in production)",
            file=sys.stderr,
        )
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
