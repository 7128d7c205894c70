"""Keyset paging of the history list (GET /jobs): its orders, and cursors both ways.

A cursor is the position of one row in one order: base64 of "order|key|id", the key being the
row's time (ISO 8601) or its duration (whole microseconds). `cursor` pages after that row,
`before` before it; either way a page is in the order asked, ties broken by id the same way.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DurationField, F, Func, Q, QuerySet
from django.db.models.functions import Coalesce
from django.db.models.sql.compiler import SQLCompiler
from ninja.errors import HttpError

from jobsite.jobs.models import JobRecord

# The orders the list offers: a time column or the duration, largest ("-") or smallest first.
Sort = Literal[
    "-submitted_at",
    "submitted_at",
    "-started_at",
    "started_at",
    "-completed_at",
    "completed_at",
    "-duration_seconds",
    "duration_seconds",
]


class LatestRun(Func):
    """An item's duration_seconds as the database computes it: the latest attempt's start
    (retried_at after a retry, else started_at) to the end, as jobout.ended() does.

    No index holds it (one would cost every mirror batch a write): the order reads every
    matching row that ran and ended and keeps the page's best (docs/api.md: its cost).
    """

    output_field = DurationField()

    def __init__(self) -> None:
        super().__init__(F("completed_at"), Coalesce("retried_at", "started_at"))

    def as_sql(  # type: ignore[override]
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        """Subtract as Django does (PostgreSQL: an interval, to the microsecond)."""
        end, start = (compiler.compile(e) for e in self.get_source_expressions())
        sql, params = connection.ops.subtract_temporals("DateTimeField", end, start)
        return sql, list(params)

    def as_sqlite(  # type: ignore[override]
        self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any
    ) -> tuple[str, list[Any]]:
        """Subtract in SQLite's own julianday(), not Django's function in Python (20 times
        slower at 1 M rows): whole milliseconds, the engine's resolution, as microseconds
        (SQLite reads a time to the millisecond; the days' rounding error is under 0.1 ms)."""
        (end, end_params), (start, start_params) = (
            compiler.compile(e) for e in self.get_source_expressions()
        )
        sql = f"(CAST(round((julianday({end}) - julianday({start})) * 86400000) AS INTEGER) * 1000)"
        return sql, [*end_params, *start_params]


DURATION_KEY = "duration_key"
ONE_US = timedelta(microseconds=1)


@dataclass(frozen=True)
class Page:
    """The rows of one page (plain values) and the cursors of its neighbours (None: no rows)."""

    rows: list[dict[str, Any]]
    next_cursor: str | None
    prev_cursor: str | None


@dataclass(frozen=True)
class Order:
    """One of the list's orders: its sort value, the key it orders by, the direction."""

    sort: str

    @property
    def descending(self) -> bool:
        return self.sort.startswith("-")

    @property
    def key(self) -> str:
        field = self.sort.lstrip("-")
        return DURATION_KEY if field == "duration_seconds" else field

    def keyed(self, rows: QuerySet[JobRecord]) -> QuerySet[JobRecord]:
        """Return the rows that have this order's key (all, for the submission time)."""
        if self.key == DURATION_KEY:  # the columns' test is cheaper than the duration's
            started = Q(started_at__isnull=False) | Q(retried_at__isnull=False)
            return rows.filter(started, completed_at__isnull=False).annotate(
                **{DURATION_KEY: LatestRun()}
            )
        if self.key != "submitted_at":
            rows = rows.filter(**{f"{self.key}__isnull": False})
        return rows

    def by(self, descending: bool) -> tuple[str, str]:
        """Return the ORDER BY of the key then the id, both one way."""
        return (f"-{self.key}", "-id") if descending else (self.key, "id")

    def beyond(
        self, rows: QuerySet[JobRecord], at: Any, row_id: str, descending: bool
    ) -> QuerySet[JobRecord]:
        """Return the rows past the position (at, row_id) going `descending` or not."""
        # A plain range on the key first, so an index serves the page (an OR would not).
        key = self.key
        if descending:
            return rows.filter(**{f"{key}__lte": at}).exclude(**{key: at, "id__gte": row_id})
        return rows.filter(**{f"{key}__gte": at}).exclude(**{key: at, "id__lte": row_id})

    def fetch(
        self, rows: QuerySet[JobRecord], columns: Sequence[str], n: int
    ) -> list[dict[str, Any]]:
        """Return the first `n` of the ordered `rows`, their `columns` and the key."""
        if self.key == "submitted_at":  # its index walks the order and stops at the page's end
            return list(rows.values(*{*columns, self.key})[:n])
        # No index holds the order, so every row goes through the sort: ids and keys only, then
        # the page's rows by id (the wide columns, arguments and errors, would go through too).
        keys = list(rows.values_list("id", self.key)[:n])
        found = JobRecord.objects.filter(id__in=[i for i, _ in keys]).order_by().values(*columns)
        by_id = {row["id"]: row for row in found}
        return [{**by_id[i], self.key: k} for i, k in keys if i in by_id]

    def any_beyond(
        self, rows: QuerySet[JobRecord], row: dict[str, Any], descending: bool, anchor: str
    ) -> bool:
        """Tell whether a row lies past `row` going `descending`: most often the cursor's own
        row `anchor` (found by id), else any (a scan where no index holds the order)."""
        past = self.beyond(rows, row[self.key], row["id"], descending).order_by()
        return past.filter(id=anchor).exists() or past.exists()

    def cursor(self, row: dict[str, Any]) -> str:
        """Return the cursor of `row`'s position in this order."""
        at = row[self.key]
        stamp = str(at // ONE_US) if isinstance(at, timedelta) else (at.isoformat() if at else "")
        return base64.urlsafe_b64encode(f"{self.sort}|{stamp}|{row['id']}".encode()).decode()

    def position(self, cursor: str) -> tuple[Any, str]:
        """Return the key and id a cursor of this order holds (422 for a foreign cursor)."""
        try:
            made_for, stamp, row_id = (
                base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 2)
            )
            if made_for != self.sort:
                raise HttpError(422, f"this cursor pages the order {made_for!r}, not {self.sort!r}")
            if self.key == DURATION_KEY:
                return timedelta(microseconds=int(stamp)), row_id
            return datetime.fromisoformat(stamp), row_id
        except ValueError:
            raise HttpError(422, "invalid cursor") from None


def page(
    rows: QuerySet[JobRecord],
    sort: str,
    columns: Sequence[str],
    limit: int,
    after: str | None = None,
    before: str | None = None,
) -> Page:
    """Return the `limit` rows (their `columns`) after the cursor `after`, or the `limit` rows
    just before the cursor `before` (in the order `sort` both), or the first `limit` rows."""
    if after and before:
        raise HttpError(422, "give cursor (the page after) or before (the page before), not both")
    order = Order(sort)
    rows = order.keyed(rows)
    ahead, back = order.descending, not order.descending
    if before:  # walk the other way from the cursor's row, then turn the page around
        at, anchor = order.position(before)
        behind = order.beyond(rows, at, anchor, back).order_by(*order.by(back))
        got = order.fetch(behind, columns, limit + 1)
        earlier, got = len(got) > limit, got[:limit][::-1]
        later = bool(got) and order.any_beyond(rows, got[-1], ahead, anchor)
    else:
        after_rows, anchor = rows, ""
        if after:
            at, anchor = order.position(after)
            after_rows = order.beyond(rows, at, anchor, ahead)
        got = order.fetch(after_rows.order_by(*order.by(ahead)), columns, limit + 1)
        later, got = len(got) > limit, got[:limit]
        earlier = bool(after and got) and order.any_beyond(rows, got[0], back, anchor)
    return Page(
        rows=[{k: v for k, v in row.items() if k in columns} for row in got],
        next_cursor=order.cursor(got[-1]) if later else None,
        prev_cursor=order.cursor(got[0]) if earlier else None,
    )
