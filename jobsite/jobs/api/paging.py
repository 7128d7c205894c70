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

from django.db.models import F, QuerySet
from django.db.models.functions import Coalesce
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

# An item's duration_seconds as the database computes it: the latest attempt's start (retried_at
# after a retry, else started_at) to the end, as jobout.ended() does. No index holds it (one
# would cost every mirror batch a write): the order reads every matching row that ran and ended
# and keeps the page's best (docs/api.md says what that costs). Microseconds on both databases.
DURATION = F("completed_at") - Coalesce("retried_at", "started_at")
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
        if self.key == DURATION_KEY:
            rows = rows.annotate(**{DURATION_KEY: DURATION})
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
    wanted = [*columns, *([order.key] if order.key not in columns else [])]
    if before:  # walk the other way from the cursor's row, then turn the page around
        at, row_id = order.position(before)
        back = order.beyond(rows, at, row_id, not order.descending)
        got = list(back.order_by(*order.by(not order.descending)).values(*wanted)[: limit + 1])
        earlier, got = len(got) > limit, got[:limit][::-1]
        later = bool(got) and _any_beyond(order, rows, got[-1], order.descending)
    else:
        ahead = rows
        if after:
            ahead = order.beyond(rows, *order.position(after), order.descending)
        got = list(ahead.order_by(*order.by(order.descending)).values(*wanted)[: limit + 1])
        later, got = len(got) > limit, got[:limit]
        earlier = (
            bool(after) and bool(got) and _any_beyond(order, rows, got[0], not order.descending)
        )
    return Page(
        rows=[{k: v for k, v in row.items() if k in columns} for row in got],
        next_cursor=order.cursor(got[-1]) if later else None,
        prev_cursor=order.cursor(got[0]) if earlier else None,
    )


def _any_beyond(order: Order, rows: QuerySet[JobRecord], row: dict[str, Any], desc: bool) -> bool:
    """Tell whether any row lies past `row` going `desc` (the page has a neighbour there)."""
    return order.beyond(rows, row[order.key], row["id"], desc).order_by().exists()
