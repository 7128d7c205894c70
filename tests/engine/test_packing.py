"""The engine's command packer: the bytes redis-py would send, made by hiredis in one call."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from engine.transport.connection import engine_connection

COMMANDS = [
    ("EVALSHA", "a" * 40, 2, "jobsite:{q}:meta", b"raw", 1.5, -7, "é", *["x"] * 400),
    ("SCRIPT LOAD", "return 1"),  # a two-word name: split, as redis-py does
    (b"CONFIG GET", b"maxmemory"),
    ("SET", "k", bytearray(b"from a bytearray")),
    ("SET", "k", memoryview(b"from a memoryview")),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0]))
def test_the_bytes_are_redis_pys(command: tuple[object, ...]) -> None:
    ours = engine_connection(Connection)(host="127.0.0.1", port=1)
    theirs = Connection(host="127.0.0.1", port=1)
    assert b"".join(ours.pack_command(*command)) == b"".join(theirs.pack_command(*command))


@pytest.mark.parametrize("bad", [True, None, object()])
def test_an_argument_redis_cannot_take_is_refused_as_redis_py_refuses_it(bad: object) -> None:
    ours = engine_connection(Connection)(host="127.0.0.1", port=1)
    with pytest.raises(DataError):
        ours.pack_command("SET", "k", bad)
    with pytest.raises(DataError):
        Connection(host="127.0.0.1", port=1).pack_command("SET", "k", bad)
