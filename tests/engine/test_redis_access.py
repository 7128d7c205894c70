"""Who speaks Redis: plain commands only in the store (transport, seam), the resources and the
private servers of dev/.

A plain command is a call of a redis-py command method (`hget`, `zadd`, `pipeline`, `execute`,
...) on a connection or a pipeline, found by reading every engine module's syntax tree. A module
that starts speaking Redis fails this test: its access goes into the resource of what it
touches (`engine/resources/`, or `engine/resources/duties/` for a worker process's own duties).
"""

from __future__ import annotations

import ast
from pathlib import Path

import redis.commands.cluster
import redis.commands.core

import engine

ROOT = Path(engine.__file__).parent
COMMANDS = {
    name
    for cls in (redis.commands.core.CoreCommands, redis.commands.cluster.RedisClusterCommands)
    for name in dir(cls)
    if not name.startswith("_")
} | {"pipeline", "execute", "execute_command", "evalsha", "script_load"}
# The receivers a command is sent on, by the last part of their name.
CONNECTIONS = ("redis", "pipe", "blocking", "conn", "node", "primary", "replica")
# Where Redis is spoken by design: the store (the connection, the typed scripts, one SCAN step)
# and the resources, plus the private test servers.
STORE = ("transport/", "seam/", "resources/", "dev/", "ops/scanning.py")


def speakers() -> dict[str, list[str]]:
    """Return each engine module that sends plain Redis commands, with the first few (line:
    receiver.command)."""
    found: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = ast.unparse(node.func.value).split(".")[-1].lower()
            if node.func.attr in COMMANDS and any(c in receiver for c in CONNECTIONS):
                found.setdefault(name, []).append(f"{node.lineno}:{receiver}.{node.func.attr}")
    return found


def test_only_the_store_the_resources_and_the_named_modules_speak_redis() -> None:
    outside = {name: calls[:3] for name, calls in speakers().items() if not name.startswith(STORE)}
    assert not outside, f"plain Redis commands outside the store and the resources: {outside}"


def test_the_resources_speak_redis() -> None:
    # The scan finds what it is meant to (a scan that found nothing would pass the tests above).
    assert {
        "resources/jobs.py",
        "resources/queues.py",
        "resources/workers.py",
        "resources/duties/claims.py",
        "resources/duties/feed.py",
    } <= set(speakers())
