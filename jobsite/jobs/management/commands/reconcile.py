"""manage.py reconcile: mark live rows whose job exists nowhere in Redis as lost (or resubmit)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from jobsite.jobs.history.reconcile import reconcile


class Command(BaseCommand):
    help = "Find live job rows whose job exists nowhere in Redis; mark them lost or resubmit them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--policy", choices=["lost", "resubmit"], default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        counts = reconcile(options["policy"])
        self.stdout.write(" ".join(f"{k}={v}" for k, v in counts.items()))
