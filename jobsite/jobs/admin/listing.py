"""Admin changelist pieces that stay cheap on a history of millions of rows.

Filter choices come from the task registry and the configured queues, never from a `DISTINCT`
over the table, and the paginator counts at most `BoundedPaginator.cap` rows.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

from jobsite.jobs import conf
from jobsite.jobs.tasks.registry import known_tasks


class BoundedPaginator(Paginator):
    """Count at most `cap` + 1 rows (COUNT over a LIMIT subquery); page links stop there."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        """Return the number of rows, or `cap` + 1 when there are more."""
        rows = cast("QuerySet[Any]", self.object_list)  # the admin pages a queryset
        return int(rows.order_by()[: self.cap + 1].count())


class _ChoiceFilter(admin.SimpleListFilter):
    """Filter on one column by choices known without reading the table."""

    parameter_name: str  # (each subclass names its column)

    def choices_known(self) -> list[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in self.choices_known()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.parameter_name: value}) if value else queryset


class QueueFilter(_ChoiceFilter):
    title = "queue"
    parameter_name = "queue"

    def choices_known(self) -> list[str]:
        return sorted(conf.queues())


class TaskFilter(_ChoiceFilter):
    title = "task"
    parameter_name = "task"

    def choices_known(self) -> list[str]:
        return sorted(known_tasks())
