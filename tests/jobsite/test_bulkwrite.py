"""The mirror's bulk writes: every path makes the same row, times as the text Django writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from jobsite.jobs.history import bulkwrite
from jobsite.jobs.history import rows as history
from jobsite.jobs.history.rows import ALL_BUT_ID
from jobsite.jobs.models import JobRecord

pytestmark = pytest.mark.django_db(transaction=True)


# A hash with every field the row takes, each set (the times 1 ms apart).
FULL_HASH = {
    "queue": "default",
    "task": "t.full",
    "version": "3",
    "state": "completed",
    "priority": "7",
    "attempt": "2",
    "args": '[1, "a"]',
    "kwargs": '{"k": 2}',
    "result": '{"ok": true}',
    "errors": '[{"type": "E", "message": "m"}]',
    "progress": "50.5",
    "progress_message": "half",
    "logs": '[{"message": "l"}]',
    "logs_dropped": "4",
    "worker": "w1",
    "fingerprint": "fp",
    "replay_of": "r0",
    "parents": '["p1"]',
    "flow_id": "f1",
    **{f"{name}_ms": str(1_795_000_000_000 + i) for i, name in enumerate(history.TIMES)},
}


def _staged(
    job: str, fields: dict[str, str], last: str = "5-0", transitions: str = "[]"
) -> bulkwrite.Staged:
    return bulkwrite.Staged(job, last, transitions, history.row_values(fields))


def test_every_write_path_makes_the_same_row_from_a_hash() -> None:
    """A row copied in as new, one upserted and one updated in place (PostgreSQL's three
    paths; SQLite's one) agree on every column."""
    paths = {"new": set(), "upserted": None, "updated": {"updated"}}  # stored_ids
    with transaction.atomic():  # a row to update
        bulkwrite.upsert([_staged("updated", {"id": "updated", "queue": "q"}, "1-0")], ["state"])
    for name, stored_ids in paths.items():
        staged = _staged(name, {**FULL_HASH, "id": name})
        with transaction.atomic():
            bulkwrite.upsert([staged], ALL_BUT_ID, stored_ids=stored_ids)
    skip = {"id", "updated_at"}
    new, upserted, updated = (
        {k: v for k, v in JobRecord.objects.filter(id=name).values().get().items() if k not in skip}
        for name in paths
    )
    assert new == upserted == updated
    assert new["version"] == 3 and new["args"] == [1, "a"] and new["flow_id"] == "f1"
    assert [new[name].timestamp() for name in history.TIMES] == [
        (1_795_000_000_000 + i) / 1000 for i in range(len(history.TIMES))
    ]


@pytest.mark.parametrize(
    "ms", [0, -1, 1_795_000_000_000, 1_795_000_000_007, 1_795_000_059_999, -62_135_596_799_995]
)
def test_time_text_is_the_text_django_writes(ms: int) -> None:
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    # Django writes an aware datetime to SQLite as str() of it in UTC, made naive.
    assert bulkwrite.time_text(ms) == str(moment.replace(tzinfo=None))
    assert datetime.fromisoformat(bulkwrite.time_text(ms, "+00")) == moment


def test_stored_finds_rows_whatever_their_ids_hold() -> None:
    """Ids go to PostgreSQL joined by a separator no engine id holds; an id that holds it
    (a hand-written stream entry) must still be found, or its transitions would be lost."""
    ids = ["plain-1", "odd\x1fid", "plain:2"]
    rows = [
        _staged(i, {**FULL_HASH, "id": i}, transitions=f'[{{"id": "{n}"}}]')
        for n, i in enumerate(ids)
    ]
    with transaction.atomic():
        bulkwrite.upsert(rows, ALL_BUT_ID)
    found = bulkwrite.stored([*ids, "missing"])
    assert sorted(found) == sorted(ids)
    assert found["odd\x1fid"][1] == [{"id": "1"}]
    assert sorted(bulkwrite.stored(["plain-1", "plain:2"])) == ["plain-1", "plain:2"]
