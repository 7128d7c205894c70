"""Carry a job's events to a later batch while its state in Redis is ahead of them."""

from __future__ import annotations

from engine import ENDED_STATES, Event, EventReader

ENDED = frozenset(str(s) for s in ENDED_STATES)


def unsettled(newest: dict[str, Event], states: dict[str, str]) -> set[str]:
    """Return the jobs whose state in Redis has moved past their `newest` event read so far.

    Every state change appends its event in the same script, so such a job's next events are
    further on in the stream: writing its row now would only be written over again.
    """
    return {job for job, e in newest.items() if states.get(job, e.to_state) != e.to_state}


class Carry:
    """Hold the events read but left for a later batch, unacked, by job (see Mirror)."""

    def __init__(self, reader: EventReader) -> None:
        self.reader = reader
        # The events carried, by job, and how many there are.
        self.jobs: dict[str, list[Event]] = {}
        self.size = 0

    def clear(self) -> None:
        """Forget every event carried (they stay pending in the stream)."""
        self.jobs, self.size = {}, 0

    async def hold(self, events: list[Event]) -> list[Event]:
        """Carry the jobs of `events` that are unsettled; return the events to write now.

        Only the jobs of `events` are looked at: a job carried before and not in them stays
        carried. A job of `events` whose Redis state is still that of its newest event is
        written now, with whatever was carried for it.
        """
        by_job: dict[str, list[Event]] = {}
        for e in events:
            by_job.setdefault(e.job, []).append(e)
        # A stream is read in order: a job's newest event is the last of those just read.
        newest = {job: seen[-1] for job, seen in by_job.items() if job}
        later = unsettled(newest, await self._states(newest))
        pool: list[Event] = []
        for job, seen in by_job.items():
            if job in later:
                self.jobs.setdefault(job, []).extend(seen)
                self.size += len(seen)
                continue
            before = self.jobs.pop(job, None)
            if before:
                self.size -= len(before)
                pool += before
            pool += seen
        return pool

    async def release(self, events: list[Event]) -> list[Event]:
        """Release everything carried: return it with the events of `events` to write now.

        Of `events`, an unsettled job not carried before is carried still, until the next
        release at most; one carried before is released with the rest.
        """
        carried = self.jobs
        self.clear()
        pool = await self.hold(events) if events else []
        for job in [job for job in self.jobs if job in carried]:
            again = self.jobs.pop(job)
            self.size -= len(again)
            carried[job] += again
        pool += [e for seen in carried.values() for e in seen]
        return pool

    async def _states(self, newest: dict[str, Event]) -> dict[str, str]:
        """Return the Redis state of the jobs whose `newest` event has not ended them."""
        by_queue: dict[str, list[str]] = {}
        for job, e in newest.items():
            if e.to_state not in ENDED:
                by_queue.setdefault(e.queue, []).append(job)
        states: dict[str, str] = {}
        for queue, ids in by_queue.items():
            states.update(await self.reader.job_field(queue, ids))
        return states
