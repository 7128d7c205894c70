"""manage.py jobsite <subcommand>: operations on a running Jobsite (`probe` for now)."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from engine.cli import add_probe_arguments, run_probe

from ... import conf


class Command(BaseCommand):
    help = "Operate Jobsite: `probe --live` / `probe --ready` checks this host's workers."
    requires_system_checks: list[str] = []  # a probe must stay cheap: no checks, no database

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="subcommand", required=True)
        probe = sub.add_parser(
            "probe", help="exit 0 when this host's workers are live (--live) or ready (--ready)"
        )
        add_probe_arguments(probe)

    def handle(self, *args: Any, **options: Any) -> None:
        settings = conf.engine_settings()
        if options["status_dir"]:
            settings = dataclasses.replace(settings, status_dir=options["status_dir"])
        status = run_probe(settings, options["ready"], options["pid"])
        if status:
            raise SystemExit(status)
