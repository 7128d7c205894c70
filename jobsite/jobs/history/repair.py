"""Rebuild the rows of jobs whose events were trimmed before the mirror read them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from engine import EventReader
from jobsite.jobs.history import batches

log = logging.getLogger("jobsite.mirror")


class OnDatabase(Protocol):
    """Run `fn(*args)` on the mirror's database thread and return what it returns."""

    async def __call__[T](self, fn: Callable[..., T], *args: Any) -> T: ...


class GapRepair:
    """Repair the gaps of the mirror's queues: `reader`'s group, on `on_db`'s thread.

    `settle` waits for the batch being written: a repair runs between batches.
    """

    def __init__(
        self,
        reader: EventReader,
        queues: Sequence[str],
        on_db: OnDatabase,
        settle: Callable[[], Awaitable[None]],
    ) -> None:
        self.reader = reader
        self.queues = list(queues)
        self._db = on_db
        self._settle = settle
        # Missed jobs whose hash was gone, by the stream's newest entry (sortable) then.
        self._gone_at: dict[str, str] = {}
        # Per queue, the jobs trimmed past a full missed SET not yet resynced, at the last check.
        self._uncovered: dict[str, int] = {}

    async def repair(self) -> int:
        """Rebuild the jobs whose events were trimmed before this group read them; return how
        many rows were written.

        The jobs of the queue's missed SET (trim-3.lua) are rebuilt from their hashes. One
        whose hash is gone too is judged once this mirror has read every entry the stream held
        when it was first found gone (its later events, if any, are then applied): if its row
        has not ended by then, it is counted (`gap_lost`) and logged, never invented. A loss
        the cleaner did not record (see EventReader.behind_trim), or jobs it could only count
        because the missed SET was full (`gap_unrecorded`; once that count stops growing),
        rebuild every job of the queue (`resync`). When there is something to repair it runs
        between batches (the one being written is committed first), so a row is never written
        from a hash older than an event already applied; when there is nothing, the batch being
        written is left to finish.
        """
        gaps = []
        for queue in self.queues:
            unrecorded = await self.reader.behind_trim(queue)
            uncovered = await self.reader.uncovered(queue)
            # Jobs trimmed past a full missed SET: one resync once their count stops growing
            # (not one per cleaner tick while the mirror is still far behind).
            seen, self._uncovered[queue] = self._uncovered.get(queue), uncovered
            due = uncovered > 0 and uncovered == seen
            missed = await self.reader.has_missed(queue)
            if unrecorded or due or missed:
                gaps.append((queue, unrecorded, due, uncovered, missed))
        if not gaps:
            return 0
        await self._settle()
        total = 0
        for queue, unrecorded, due, uncovered, missed in gaps:
            if unrecorded or due:
                total += await self.resync(queue)
                if unrecorded:
                    await self.reader.record_gap(queue, unrecorded)
                if uncovered:  # a resync rebuilds them, whatever made it run
                    await self.reader.record_resync(queue, uncovered)
            if not missed:
                continue
            read_to, written_to = await self.reader.positions(queue)
            rebuilt = lost = 0
            async for ids in self.reader.missed(queue):
                hashes = await self.reader.job_hashes(queue, ids)
                gone = []
                for job in ids:
                    if job in hashes:
                        continue
                    seen_at = self._gone_at.setdefault(job, written_to)
                    if read_to >= seen_at:
                        gone.append(job)
                done = await self._db(batches.rebuild_missed, hashes, gone)
                await self.reader.forget_missed(queue, [*hashes, *gone], *done)
                for job in gone:
                    self._gone_at.pop(job, None)
                rebuilt, lost = rebuilt + done[0], lost + done[1]
            if rebuilt or lost:
                log.error(
                    "mirror rebuilt jobs whose events were trimmed unread queue=%s rebuilt=%d "
                    "lost=%d",
                    queue,
                    rebuilt,
                    lost,
                )
            total += rebuilt
        return total

    async def resync(self, queue: str) -> int:
        """Rebuild from `queue`'s job hashes the rows that did not record the end their hash
        holds; return how many were written."""
        total = 0
        async for ids in self.reader.job_ids(queue):
            # Jobs whose row recorded their end are left as they are: the work is what is missing.
            ended = await self.reader.job_field(queue, ids, "completed_at_ms")
            kept = await self._db(batches.already_ended, ended) if ended else set()
            if todo := [job for job in ids if job not in kept]:
                hashes = await self.reader.job_hashes(queue, todo)
                total += await self._db(batches.resync_rows, hashes)
        log.error("mirror fell behind an unrecorded trim; resynced queue=%s jobs=%d", queue, total)
        return total
