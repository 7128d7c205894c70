"""Which storage format of job hashes (engine/fields.py) a Redis is written in.

`{p}:hash_format` holds it. A Redis that no release before 0.2 used is given the newest format
the first time a client or worker of this release asks. One that such a release used (they
knew only format 1, and lose a job they cannot read: a queue with jobs, or a worker of theirs
running) is given format 1 and keeps it until an operator moves it on (`python -m engine
hash-format --set 2`) once every process runs 0.2 or later. Every such process reads both
formats and turns a hash of the other one into its own the first time a script touches it,
so processes that disagree, for the minutes a deploy takes, lose nothing. A process asks
once, when it first needs to know.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ..errors import ConfigError
from ..fields import FORMATS
from ..keys import QueueKeys, hash_format_key, queues_key, worker_key, workers_key

# The format of a Redis nothing used yet, and of one that releases before formats used.
NEWEST = max(FORMATS)
OLDEST = min(FORMATS)

# (command, args, options) sent to Redis; each is sent the reply.
Commands = Generator[tuple[str, tuple[Any, ...], dict[str, Any]], Any, int]


def discover(prefix: str) -> Commands:
    """Return the hash format of the Redis at `prefix`, recording it the first time."""
    key = hash_format_key(prefix)
    raw = yield ("get", (key,), {})
    if raw is None:
        used = yield from _used_before(prefix)
        yield ("set", (key, str(OLDEST if used else NEWEST)), {"nx": True})
        raw = yield ("get", (key,), {})
    return parse(raw)


def _used_before(prefix: str) -> Commands:
    """Tell whether a release before formats wrote jobs here or runs a worker here: a queue
    with a sequence (every submit counts it; this release submits only once it knows the
    format), or a worker whose registry entry names no hash formats (this release's do)."""
    names = yield ("smembers", (queues_key(prefix),), {})
    for name in sorted(names):
        try:
            seq = QueueKeys(prefix, name.decode() if isinstance(name, bytes) else name).seq
        except ConfigError:
            continue
        if (yield ("exists", (seq,), {})):
            return True
    for worker_id in (yield ("zrange", (workers_key(prefix), 0, -1), {})):
        entry = worker_key(
            prefix, worker_id.decode() if isinstance(worker_id, bytes) else worker_id
        )
        if (yield ("exists", (entry,), {})) and not (
            yield ("hexists", (entry, "hash_formats"), {})
        ):
            return True
    return False


# What a worker's registry entry says it reads (`hash_formats`: engine/worker/upkeep.py).
READS = ",".join(str(n) for n in sorted(FORMATS))


async def move(redis: Any, prefix: str, fmt: int, workers: list[dict[str, Any]]) -> None:
    """Make `fmt` the format this Redis's job hashes are written in from now on.

    `workers` are the live registry entries (client.workers.list): each must read `fmt`, or the
    move is refused (ConfigError naming them), since a worker of a release before 0.2 loses a
    job it cannot read. Web processes are not registered: move only once every one of them
    runs 0.2 or later too. Processes already running keep writing the format they learned at
    their start, and every script turns what it touches into its own: nothing is lost.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"hash format {fmt} does not exist (formats: {sorted(FORMATS)})")
    behind = [w.get("id", "?") for w in workers if str(fmt) not in w.get("hash_formats", "")]
    if behind:
        raise ConfigError(
            f"workers that do not read hash format {fmt} still run: {', '.join(behind)};"
            " stop them (or let the deploy finish) first"
        )
    await redis.set(hash_format_key(prefix), str(fmt))


def parse(raw: str | bytes | None) -> int:
    """Return the format `raw` names; refuse one this release does not read."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    if text is None or not text.isdigit() or int(text) not in FORMATS:
        raise ConfigError(
            f"this Redis stores job hashes in format {text!r}, which this release does not"
            f" read (it reads {sorted(FORMATS)}): upgrade jobsite"
        )
    return int(text)


async def discover_async(redis: Any, prefix: str) -> int:
    """Run `discover` on an asyncio client."""
    commands = discover(prefix)
    reply: Any = None
    while True:
        try:
            method, args, options = commands.send(reply)
        except StopIteration as done:
            return int(done.value)
        reply = await getattr(redis, method)(*args, **options)
