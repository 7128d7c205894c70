"""The history's text search: a whole job id, or a substring of a job's search text.

PostgreSQL narrows the texts with a words index (migration 0013), SQLite with an FTS5 trigram
index (migration 0014); both then keep the texts that hold the whole search text.

Every surface that takes a search text (the API's `q`, the dashboard socket's filter, the
admin's search box) checks it with `check_text`, or takes it as a `SearchText`.
"""

from __future__ import annotations

import re
from typing import Annotated

from django.db import connection, models
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL
from pydantic import AfterValidator, Field

from jobsite.jobs.models import JobRecord, JobSearch

# Below this many characters a search matches whole ids and task names only.
SEARCH_MIN_CHARS = 3
# PostgreSQL: the words of a search text (runs of letters and digits), in a GIN index (migration
# 0013). A search first finds the jobs having every word of the text (its last one may be a
# word's start), then keeps those whose text holds the whole search text.
SEARCH_WORDS_SQL = (
    "to_tsvector('simple'::regconfig, regexp_replace(text, '[^[:alnum:]]+', ' ', 'g'))"
)
SEARCH_WORDS_INDEX = "jobsite_search_words"
_WORD = re.compile(r"[^\W_]+")
_MOST_WORDS = 16
# SQLite: the FTS5 trigram index of the search texts (migration 0014), when SQLite has FTS5.
SEARCH_TRIGRAMS = "jobsite_search_trigrams"
# The longest search text a surface takes.
SEARCH_MAX_CHARS = 200
# Control characters (C0, DEL, C1): no job's text is searched for by one, and a NUL cut the
# LIKE pattern short on SQLite, so "\x00zz" matched every row.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_text(text: str) -> str:
    """Return `text`, or raise ValueError naming the control characters it holds."""
    found = sorted(set(_CONTROL.findall(text)))
    if found:
        names = ", ".join(f"U+{ord(c):04X}" for c in found)
        raise ValueError(f"a search text may not hold control characters; found {names}")
    return text


# A search text as the API and the dashboard socket take it: 422 (or an error message) for one
# holding a control character, naming it.
SearchText = Annotated[str, Field(max_length=SEARCH_MAX_CHARS), AfterValidator(check_text)]


def _words_match(text: str) -> models.Q | None:
    """Return the index filter of a search (None: no index can narrow it)."""
    if connection.vendor == "sqlite":
        return _trigrams_match(text)
    words = _WORD.findall(text)[:_MOST_WORDS]
    if connection.vendor != "postgresql" or not words:
        return None
    # Words with a separator after them in the text are whole words; the last may go on (a
    # prefix). A prefix lookup unions every word it starts, so only the last one is.
    if _WORD.fullmatch(text[-1]):
        words[-1] += ":*"
    query = " & ".join(words)
    match = RawSQL(
        f"{SEARCH_WORDS_SQL} @@ to_tsquery('simple', %s)", [query], output_field=BooleanField()
    )
    return models.Q(match)


def _trigrams_match(text: str) -> models.Q | None:
    """Return SQLite's trigram filter: the texts holding `text` anywhere (None: no index)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM sqlite_master WHERE name = %s", [SEARCH_TRIGRAMS])
        if cursor.fetchone() is None:
            return None
    phrase = '"' + text.replace('"', '""') + '"'
    match = RawSQL(
        # Unqualified: the search may run as a subquery, where its table has an alias.
        f"rowid IN (SELECT rowid FROM {SEARCH_TRIGRAMS} WHERE {SEARCH_TRIGRAMS} MATCH %s)",
        [phrase],
        output_field=BooleanField(),
    )
    return models.Q(match)


def text_search(
    rows: models.QuerySet[JobRecord], text: str, ids_up_to: int = 0
) -> models.QuerySet[JobRecord]:
    """Filter rows whose whole id is `text`, or whose task, arguments or errors contain it.

    Substrings are found in JobSearch (any case). On PostgreSQL the word index narrows them
    first, so the text must begin at the start of a word there ("4567" finds "user-4567",
    "567" does not); on SQLite the trigram index does (any substring), else SQLite scans.
    Text shorter than SEARCH_MIN_CHARS matches a whole job id or task name instead. With
    `ids_up_to`, the search runs once, now, and the rows are filtered by the ids it found when
    there are no more than that many (a caller that reads the rows twice, a count and a page,
    then searches once); else by the search as a subquery. A control character in `text` is a
    ValueError (`check_text`): the surfaces refuse it before.
    """
    text = check_text(text).strip()
    if len(text) < SEARCH_MIN_CHARS:
        return rows.filter(models.Q(id=text) | models.Q(task=text))
    lower = text.lower()
    contains = models.Q(text__contains=lower)
    words = _words_match(lower)
    found = JobSearch.objects.filter(
        models.Q(job_id=text) | (contains if words is None else words & contains)
    )
    if ids_up_to > 0:
        ids = list(found.values_list("job_id", flat=True)[: ids_up_to + 1])
        if len(ids) <= ids_up_to:
            return rows.filter(id__in=ids)
    return rows.filter(id__in=found.values("job_id"))
