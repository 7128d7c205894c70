"""Transition hooks: every retry and every end but completion, wherever it happened, to hooks.

A worker runs its before_run and after_run hooks around each attempt it runs itself. What a job
goes through elsewhere (the cleaner expiring or stalling it, a user cancelling it, a parent's
failure ending it, a retry, the dead-letter queue) reaches the hooks from one source: the
queue's event stream, which every transition script appends to. Each worker that has hooks
reads the streams of its queues as one consumer of the consumer group `hooks`, calls the hooks,
then acknowledges; Redis hands each entry to one consumer of the group, so each transition
fires once across all workers. Entries a reader took and never acknowledged (its process died)
are taken over by another after IDLE_MS, so a crash between a hook and its ack can fire that
transition again: at least once, exactly once unless a reader dies mid-batch.

The group is opt-in: it exists once a worker with hooks started, and starts at the stream's end
then (older transitions are not reported). Each reader registers the group in
`event_groups_key` (group -> last read ms); the cleaner trims the streams only below what every
group read within `GROUP_STALE_MS` has acknowledged (`feed.live_groups`), so a group that
nothing reads any more never holds trimming back.

Kinds, from an event `from -> to`:
- `retry`: started -> scheduled | submitted after a failed attempt or a recovered stall (not a
  job handed back unrun: HAND_BACKS);
- `expired`, `stalled`, `dropped`, `cancelled`, `failed`: to that state (a child a parent's
  failure ended is `cancelled` or `failed` from `blocked`, with the reason in `reason`);
- `dead_letter`: after `failed`, `stalled`, `expired` or `dropped`, when the job went to the
  dead-letter queue (its `dlq` field is not '0');
- `deduplicated`, `debounced`: a note, not a transition (Event.note): the submit of another job
  was ignored for this one, or another job replaced this one (its `cancelled` came before);
  `reason` names the other job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

from redis.asyncio import Redis

from .. import serializer
from ..job import Job, JobState
from ..resources.duties.feed import EventReader, create_groups_at_end, register_group
from ..settings import EngineSettings
from ..stream.events import Event
from ..stream.hooks import HookEvent, Hooks
from ..transport.connection import connect
from ..transport.reconnect import Reconnect

log = logging.getLogger("engine.transitions")

GROUP = "hooks"
# Events a read takes. The reader shares its worker's event loop, which is busy running jobs: a
# read waits its turn, tens of ms under load, so small reads fall behind a busy stream and hold
# its trimming back (docs/benchmarks.md); the most a crash in mid-batch fires again is one read.
BATCH = 2000
BLOCK_MS = 1000
# How often a reader takes over entries another reader left unacknowledged (it died).
CLAIM_EVERY_S = 10.0
# The reasons of a started job handed back unrun (no attempt used): not a retry.
HAND_BACKS = frozenset(
    {
        "claimed, never began; worker lost",
        "worker died while the job ran isolated",
        "the reply of its claim or begin was lost",
        "Shutdown: claimed, not begun",
        "Shutdown: resubmitted on shutdown",
        "handed back",
    }
)
_ENDS = {"expired", "stalled", "dropped", "cancelled", "failed"}
_DEAD_LETTERED = {"failed", "stalled", "expired", "dropped"}


def kinds(event: Event) -> list[str]:
    """Return the hook kinds an event is, before knowing the job (dead_letter needs it)."""
    if event.is_note:
        return [event.note]
    if event.to_state in _ENDS:
        return [event.to_state]
    if (
        event.from_state == JobState.STARTED
        and event.to_state in (JobState.SCHEDULED, JobState.SUBMITTED)
        and event.error not in HAND_BACKS
    ):
        return ["retry"]
    return []


def dead_lettered(job: Job, state: str) -> bool:
    """Tell whether a job that ended in `state` went to the DLQ: not with dead_letter_policy
    "none" (`dlq` '0'), nor when its cleanup_on names the state (common.lua's bury)."""
    return job.dlq != "0" and state not in serializer.loads(job.cleanup_ms or "{}")


class TransitionHooks:
    """Read the `hooks` group of some queues' event streams and call the hooks per transition."""

    def __init__(
        self, settings: EngineSettings, queues: Sequence[str], hooks: Hooks, consumer: str
    ) -> None:
        self.settings = settings
        self.queues = list(queues)
        self.hooks = hooks
        self.consumer = consumer
        self.fired = 0
        self._made = False
        # Queues added since the reader was made (follow): the run loop makes a new one.
        self._added = False

    def follow(self, queues: Sequence[str]) -> None:
        """Read the streams of `queues` too from now on (the worker's role changed); those of
        the queues it left stay read, for the jobs still running from them."""
        added = [q for q in queues if q not in self.queues]
        if added:
            self.queues += added
            self._made = False  # prepare() makes the group on the new streams
            self._added = True

    async def run(self, draining: asyncio.Event) -> None:
        """Fire hooks until `draining` is set, then for what the streams still hold, and stop."""
        retry = Reconnect("transition hooks")
        redis = connect(self.settings, block_s=BLOCK_MS / 1000)
        try:
            reader = EventReader(redis, self.settings, self.queues, GROUP, self.consumer)
            claimed_at = 0.0
            while True:
                try:
                    await self.prepare(redis)
                    if self._added:
                        self._added = False
                        await reader.close()  # what its reads took stays pending: read below
                        reader = EventReader(
                            redis, self.settings, self.queues, GROUP, self.consumer
                        )
                        claimed_at = 0.0
                    if time.monotonic() - claimed_at > CLAIM_EVERY_S:
                        claimed_at = time.monotonic()
                        await self._fire(reader, await reader.pending(BATCH))
                    if draining.is_set():
                        await self._fire(reader, await reader.pending(BATCH))
                        while await self._fire(reader, await reader.read(BATCH, None)):
                            pass
                        return
                    await self._fire(reader, await self._read_until(reader, draining))
                    retry.ok()
                except Exception as exc:
                    if draining.is_set():
                        log.warning("transition hooks stopped unread error=%r", exc)
                        return
                    await retry.failed(exc)  # re-raises anything but a Redis failure
        finally:
            await redis.aclose()

    @staticmethod
    async def _read_until(reader: EventReader, draining: asyncio.Event) -> list[Event]:
        """Return new events, waiting up to BLOCK_MS; [] at once when `draining` is set (the
        read is cancelled: what it took stays pending for this consumer, the drain reads it)."""
        read = asyncio.ensure_future(reader.read(BATCH, BLOCK_MS))
        stop = asyncio.ensure_future(draining.wait())
        await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if read.done():
            return read.result()
        read.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await read
        return []

    async def prepare(self, redis: Redis) -> None:
        """Register the group (read now) and create it where missing, at the stream's end.

        The worker calls it before it claims, so no transition of its own is missed.
        """
        await register_group(redis, self.settings.prefix, GROUP)
        if self._made:
            return
        await create_groups_at_end(redis, self.settings.prefix, self.queues, GROUP)
        self._made = True

    async def _fire(self, reader: EventReader, events: list[Event]) -> int:
        """Call the hooks for `events` in order, then acknowledge them; return how many."""
        if not events:
            return 0
        wanted = [(e, k) for e in events if (k := kinds(e))]
        jobs = await self._jobs(reader, [e for e, _ in wanted])
        for (event, names), job in zip(wanted, jobs, strict=True):
            for kind in names:
                await self._emit(kind, event, job)
            if names[0] in _DEAD_LETTERED and dead_lettered(job, names[0]):
                await self._emit("dead_letter", event, job)
        await reader.ack(events)
        return len(events)

    async def _emit(self, kind: str, event: Event, job: Job) -> None:
        delay_s = None
        if kind == "retry":
            due = job.run_at_ms if event.to_state == JobState.SCHEDULED else None
            delay_s = max(0.0, (due - event.at_ms) / 1000) if due else 0.0
        self.fired += 1
        reason = event.error
        if event.is_note:
            verb = "ignored for it" if kind == "deduplicated" else "replaced it"
            reason = f"job {event.other} {verb}"
        await self.hooks.emit(
            HookEvent(
                kind,  # type: ignore[arg-type]
                job,
                event.worker,
                outcome=event.to_state if kind != "retry" else "retry",
                error=job.error,
                delay_s=delay_s,
                from_state=event.from_state,
                reason=reason,
                at_ms=event.at_ms,
                other_job=event.other or None,
            )
        )

    async def _jobs(self, reader: EventReader, events: list[Event]) -> list[Job]:
        """Return each event's job as Redis holds it now (a stub when it is gone)."""
        if not events:
            return []
        found = await reader.current_hashes(events)
        return [
            Job.from_hash(fields, e.job, e.queue)
            if fields
            else Job(id=e.job, task="", queue=e.queue, state=JobState(e.to_state or "unsubmitted"))
            for e, fields in zip(events, found, strict=True)
        ]
