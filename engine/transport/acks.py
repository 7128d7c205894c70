"""Writes acknowledged by replicas: `WAIT` after a script call, on the connection that made it.

Redis replicates asynchronously: a master answers a write before any replica has it, and a
failover in those milliseconds loses it. With `EngineSettings.replica_acks` N, each script call
that writes is sent together with `WAIT N replica_ack_timeout_ms`, in one write on one
connection. WAIT waits for the writes of its own connection only (for the replication offset
the connection's last write left), so it must follow the call on that connection: a pooled
client sending it as a second command may take another connection, whose WAIT returns at once.
The plain pool's held connections send both in one write (held.py); Sentinel and cluster
clients send a pipeline, which one connection carries (on a cluster, to the node of the call's
keys: WAIT has no key, so it is sent to that node by name).

Fewer acknowledgements than N within the timeout raise ReplicaAckTimeout: the caller keeps the
work and retries, as after a lost reply. A retry that finds its work done (a completion the
first call made) writes nothing, and WAIT then need not cover the first call's write, still
unacknowledged: Redis 7.0 moves a connection's offset with any command, later versions only with
a command that writes, and a fresh connection's is 0. So after a timeout the next calls of the
same set of scripts write a small key in the slot of their own keys (`keys.ack_fence_key`)
before their WAIT, until one such call is acknowledged: every write made before it is then on
the replicas too (replication keeps the master's order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoPermissionError

from ..errors import ReplicaAckTimeout
from ..keys import ack_fence_key
from ..settings import EngineSettings
from .cluster import is_cluster, ready
from .faults import typed
from .held import AsyncHeldConnections, HeldConnections

# How long a fence key lives: it only needs to be written (its value is never read).
FENCE_TTL_MS = 60_000

Command = tuple[Any, ...]


@dataclass(slots=True, eq=False)
class Sent:
    """What `ReplicaAcks.commands` made for one call: the commands and its fence mark."""

    commands: list[Command]
    # The timeouts seen when it was made, if it carries a fence write; else -1.
    fenced_at: int


@dataclass(slots=True, eq=False)
class ReplicaAcks:
    """WAIT after each script call of one set of scripts, and the fence after a timeout."""

    replicas: int
    timeout_ms: int
    shown_url: str
    # Timeouts seen so far, and how many of them a fenced call acknowledged since covers.
    timeouts: int = 0
    covered: int = 0

    @classmethod
    def of(cls, settings: EngineSettings) -> ReplicaAcks | None:
        """Return the acknowledgements `settings` ask for (None: replica_acks is 0)."""
        if not settings.replica.acks:
            return None
        return cls(settings.replica.acks, settings.replica.timeout_ms, settings.redacted_url)

    def commands(self, call: Command, key: str) -> Sent:
        """Return what to send for `call` (a script call whose first key is `key`): the call, a
        fence write while a timeout is not covered yet, then WAIT."""
        out = [call]
        fenced_at = -1
        if self.timeouts > self.covered:
            fenced_at = self.timeouts
            out.append(("SET", ack_fence_key(key), fenced_at, "PX", FENCE_TTL_MS))
        out.append(("WAIT", self.replicas, self.timeout_ms))
        return Sent(out, fenced_at)

    def reply(self, sent: Sent, replies: Sequence[Any]) -> Any:
        """Return the call's reply once enough replicas acknowledged it.

        An error reply of the call (NOSCRIPT included: the caller loads the script) or of the
        fence raises as it is; fewer acknowledgements than asked, or a WAIT refused (the node
        is a replica by now), raise ReplicaAckTimeout.
        """
        answer, *fence, acked = replies
        if isinstance(answer, Exception):
            raise answer
        for reply in fence:
            if isinstance(reply, Exception):
                raise reply
        if isinstance(acked, NoPermissionError):
            raise acked  # an ACL without WAIT: a configuration to fix, not to retry for ever
        if isinstance(acked, Exception) or int(acked) < self.replicas:
            self.timeouts += 1
            got = 0 if isinstance(acked, Exception) else int(acked)
            detail = f" (WAIT: {acked})" if isinstance(acked, Exception) else ""
            error = ReplicaAckTimeout(got, self.replicas, self.timeout_ms, self.shown_url, detail)
            error.reply = answer
            if isinstance(acked, Exception):
                raise error from acked
            raise error
        if sent.fenced_at > self.covered:
            self.covered = sent.fenced_at
        return answer


async def send(runner: Any, commands: Sequence[Command], key: str, url: str) -> list[Any]:
    """Send `commands` on one connection of `runner` (held connections, or a client: plain,
    Sentinel or cluster); return their replies, errors typed in their places.

    On a cluster every command goes to the node holding `key` (WAIT by name); a call
    redirected meanwhile (MOVED: the slot moved) ran elsewhere than its WAIT, so the WAIT's
    reply is replaced by an error and the call counts as unacknowledged.
    """
    if isinstance(runner, AsyncHeldConnections):
        return await runner.execute_many(commands)
    node = None
    if is_cluster(runner):
        await ready(runner)
        node = runner.get_node_from_key(key)
    async with runner.pipeline(transaction=False) as pipe:
        for command in commands:
            if node is not None and command[0] == "WAIT":
                pipe.execute_command(*command, target_nodes=node)
            else:
                pipe.execute_command(*command)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
    if node is not None and runner.get_node_from_key(key).name != node.name:
        replies[-1] = RuntimeError("the slot moved to another node during the call")
    return [typed(r, url) if isinstance(r, Exception) else r for r in replies]


def send_sync(runner: Any, commands: Sequence[Command], key: str) -> list[Any]:
    """Send `commands` on one connection of a synchronous `runner` (see `send`); errors stay
    redis-py's (the SyncClient types them)."""
    if isinstance(runner, HeldConnections):
        return runner.execute_many(commands)
    node = runner.get_node_from_key(key) if is_cluster(runner) else None
    with runner.pipeline(transaction=False) as pipe:
        for command in commands:
            if node is not None and command[0] == "WAIT":
                pipe.execute_command(*command, target_nodes=node)
            else:
                pipe.execute_command(*command)
        replies: list[Any] = pipe.execute(raise_on_error=False)
    if node is not None and runner.get_node_from_key(key).name != node.name:
        replies[-1] = RuntimeError("the slot moved to another node during the call")
    return replies
