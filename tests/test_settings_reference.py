"""docs/settings.md names every setting, and nothing else, with the code's defaults.

The settings come from the code: EngineSettings' fields, conf.DJANGO_KEYS and the alias keys,
health.DEFAULTS, the backend's OPTIONS reads, and the flags of runworker and `python -m engine`.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management.base import CommandParser

from engine import cli
from engine.settings import EngineSettings
from jobsite.jobs import conf
from jobsite.jobs.history import health
from jobsite.jobs.management.commands import runworker
from jobsite.jobs.tasks import backend

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "settings.md"
FIELDS = {f.name: f for f in dataclasses.fields(EngineSettings) if f.init}
# Each table's kind, by the heading of its first column.
KINDS = (
    "JOBSITE key",
    "alias key",
    "HEALTH key",
    "OPTIONS key",
    "runworker flag",
    "engine worker flag",
    "engine probe flag",
)
_PIPE = re.compile(r"(?<!\\)\|")
_CODE = re.compile(r"`([^`]+)`")


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in _PIPE.split(line.strip())[1:-1]]


def tables() -> dict[str, list[dict[str, str]]]:
    """Return the doc's table rows by kind, each row keyed by its column headings."""
    found: dict[str, list[dict[str, str]]] = {kind: [] for kind in KINDS}
    lines = DOC.read_text().splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("|"):
            i += 1
            continue
        head = _cells(lines[i])
        i += 2  # the heading and the |---| line
        while i < len(lines) and lines[i].startswith("|"):
            if head[0] in found:
                found[head[0]].append(dict(zip(head, _cells(lines[i]), strict=True)))
            i += 1
    return found


def name(cell: str) -> str:
    """Return the one code span a row's first cell holds."""
    spans: list[str] = _CODE.findall(cell)
    assert len(spans) == 1, f"the first cell names one setting in backticks: {cell!r}"
    return spans[0]


def names(kind: str) -> dict[str, dict[str, str]]:
    rows = tables()[kind]
    out = {name(row[kind]): row for row in rows}
    assert len(out) == len(rows), f"a {kind} is listed twice"
    return out


def literal(cell: str) -> Any:
    """Return the value of a default cell's first code span."""
    return ast.literal_eval(_CODE.findall(cell)[0])


def same(doc: set[str], code: set[str], what: str) -> None:
    missing, extra = sorted(code - doc), sorted(doc - code)
    assert not missing, f"{what} missing from docs/settings.md: {missing}"
    assert not extra, f"docs/settings.md lists {what} that are no settings: {extra}"


def options(parser: argparse.ArgumentParser) -> set[str]:
    """Return the long flags of a parser, --help left out."""
    return {
        flag
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        for flag in action.option_strings
        if flag.startswith("--")
    }


def engine_subparser(command: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[command]
    return found


def test_every_engine_field_with_its_key_type_and_default() -> None:
    rows = names("JOBSITE key")
    same(set(rows) & {f.upper() for f in FIELDS}, {f.upper() for f in FIELDS}, "engine fields")
    for field in FIELDS.values():
        row = rows[field.name.upper()]
        assert _CODE.findall(row["field"]) == [field.name], row
        assert _CODE.findall(row["type"]) == [str(field.type)], row
        assert literal(row["default"]) == field.default, row


def test_every_django_key_and_alias() -> None:
    engine_keys = {f.upper() for f in FIELDS}
    django = {k: row for k, row in names("JOBSITE key").items() if k not in engine_keys}
    same(set(django), set(conf.DJANGO_KEYS), "Django-side JOBSITE keys")
    for key, default in conf.DJANGO_KEYS.items():
        assert literal(django[key]["default"]) == default, key
    aliases = names("alias key")
    # QUEUE_TIMEOUTS is queue_timeouts' own key, in a form with the alias names inside.
    same(set(aliases), {*conf.TIMEOUT_KEYS, "QUEUE_TIMEOUTS"}, "alias keys")
    for key, field in conf.TIMEOUT_KEYS.items():
        assert _CODE.findall(aliases[key]["sets"]) == [field]


def test_every_health_key() -> None:
    rows = names("HEALTH key")
    same(set(rows), {*health.DEFAULTS, "QUEUES"}, "HEALTH keys")
    for key, default in health.DEFAULTS.items():
        assert literal(rows[key]["default"]) == default, key


def test_every_backend_option() -> None:
    """The OPTIONS keys are those the backend reads (`.options.get("KEY"...)`)."""
    source = inspect.getsource(backend)
    read = set(re.findall(r"\.options\.get\(\s*\"([A-Z][A-Z0-9_]*)\"", source))
    assert read, "no OPTIONS reads found: has the backend's idiom changed?"
    same(set(names("OPTIONS key")), read, "TASKS OPTIONS keys")


def test_every_runworker_flag() -> None:
    parser = CommandParser(add_help=False)
    runworker.Command().add_arguments(parser)
    same(set(names("runworker flag")), options(parser), "runworker flags")


def test_every_engine_cli_flag() -> None:
    same(set(names("engine worker flag")), options(engine_subparser("worker")), "worker flags")
    same(set(names("engine probe flag")), options(engine_subparser("probe")), "probe flags")


def test_read_by_names_modules_that_exist() -> None:
    for kind, rows in tables().items():
        for row in rows:
            for path in _CODE.findall(row.get("read by", "")):
                assert (ROOT / path).is_file(), f"{kind} {row[kind]}: no module {path}"


def test_every_engine_field_has_a_comment() -> None:
    """Each EngineSettings field has a comment line right above it."""
    lines = inspect.getsource(EngineSettings).splitlines()
    for field in FIELDS:
        (at,) = (i for i, line in enumerate(lines) if line.lstrip().startswith(f"{field}:"))
        assert lines[at - 1].lstrip().startswith("#"), f"EngineSettings.{field} has no comment"


@pytest.mark.parametrize("field", sorted(set(FIELDS) - {"queue_timeouts"}))
def test_set_flag_takes_every_scalar_field(field: str) -> None:
    """`python -m engine worker --set FIELD=VALUE` takes each field the doc says it does."""
    default = FIELDS[field].default
    raw = "none" if default is None else str(default)
    assert cli.parse_overrides([f"{field}={raw}"]) == {field: default}


def test_every_group_of_settings_with_its_fields() -> None:
    """The "Grouped by owner" table names each group EngineSettings builds, its class and the
    flat fields it is built from: as many as the class has, each in one group only."""
    text = DOC.read_text().split("### Grouped by owner", 1)[1].split("\n#", 1)[0]
    rows = [_cells(line) for line in text.splitlines() if line.startswith("| `")]
    groups = {f.name: f for f in dataclasses.fields(EngineSettings) if not f.init}
    assert {_CODE.findall(row[0])[0] for row in rows} == set(groups)
    seen: list[str] = []
    for row in rows:
        name, cls = _CODE.findall(row[0])[0], _CODE.findall(row[1])[0]
        built = getattr(EngineSettings(), name)
        assert type(built).__name__ == cls, row
        flat = _CODE.findall(row[2])
        assert set(flat) <= set(FIELDS), row
        assert len(flat) == len(dataclasses.fields(built)), row
        seen += flat
    assert len(seen) == len(set(seen)), seen
