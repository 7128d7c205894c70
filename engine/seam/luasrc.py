"""Load engine/lua/*.lua (includes inlined); run each script by verb, its key count checked."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import NoScriptError

from ..fields import FORMATS, NAMES, other
from ..keys import SCRIPT_KEYS, QueueKeys
from ..transport.acks import ReplicaAcks, Sent, send, send_sync
from ..transport.faults import typed
from ..transport.held import held_runner
from .hashformat import discover_async

_NAME = re.compile(r"^(?P<verb>[a-z_]+)-(?P<keys>\d+)\.lua$")
_INCLUDE = re.compile(r"^--@include (?P<name>[a-z_]+)$", re.MULTILINE)


_FUNCTION = re.compile(r"^(?:local function (?P<local>\w+)|(?P<late>\w+) = function)\(")
_DECLARED = re.compile(r"^local (?P<name>\w+)\n?$")
# A value defined at the top of an include (`local DEAD = {...}`, to its closing brace).
_VALUE = re.compile(r"^local (?P<name>\w+) = ")
_WORD = re.compile(r"\w+")
_COMMENT = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.DOTALL)
# A job hash field as the scripts spell it: `F.state`, or `O.state` for its name in the other
# format (engine/fields.py); `F_FROM_O` is the table from the other format's names to ours.
_FIELD = re.compile(r"(?<![\w.])([FO])\.(\w+)")


def _read(name: str) -> str:
    return (resources.files("engine") / "lua" / name).read_text(encoding="utf-8")


def _chunks(text: str) -> list[tuple[str | None, str]]:
    """Split an include into top-level chunks: (the function or value it defines or declares,
    text).

    A function runs from `local function name(` (or `name = function(` after a `local name`)
    to the next line that is `end` alone; a value from `local name = ` to the line where its
    braces close; every other line is a chunk of its own, unnamed.
    """
    out: list[tuple[str | None, str]] = []
    body: list[str] = []
    name: str | None = None
    ends: Callable[[str], bool] = _ends_function  # whether the chunk under way ends (its text)
    for line in text.splitlines(keepends=True):
        if not body:
            if match := _FUNCTION.match(line):
                name, ends = match["local"] or match["late"], _ends_function
            elif match := _VALUE.match(line):
                name, ends = match["name"], _ends_value
            else:
                declared = _DECLARED.match(line)
                out.append((declared["name"] if declared else None, line))
                continue
        body.append(line)
        if ends("".join(body)):
            out.append((name, "".join(body)))
            body = []
    if body:
        raise RuntimeError(f"unterminated {name!r} in an include (no `end` line, or an open brace)")
    return out


def _ends_function(text: str) -> bool:
    return text.endswith(("\nend\n", "\nend"))


def _ends_value(text: str) -> bool:
    return text.count("{") == text.count("}")


def _words(lua: str) -> set[str]:
    """Return the words of Lua source outside its comments."""
    return set(_WORD.findall(_COMMENT.sub(" ", lua)))


def _needed(chunks: list[tuple[str | None, str]], code: str, unnamed: bool) -> set[str]:
    """Return the names of the include's functions and values `code` uses, directly or not.

    Every function of an include is a closure made again on each call of a script: leaving
    out those it never calls saves that work on every call (docs/benchmarks.md has the cost).
    With `unnamed`, the include's unnamed chunks come too, and what they use.
    """
    unnamed_text = "".join(text for name, text in chunks if name is None) if unnamed else ""
    words = _words(code + unnamed_text)
    named = {name: _words(text) for name, text in chunks if name is not None}
    while True:
        found = {w for name in words & named.keys() for w in named[name]}
        if found <= words:
            break
        words |= found
    return words & named.keys()


def _expand(script: str) -> str:
    """Return `script` with each `--@include name` line replaced by the helpers it needs.

    An include placed a second time inside a function (`local function name(` to a line that
    is `end` alone) defines there the helpers only that function's code calls; its first
    place defines what the rest of the script calls. A script calls such a function only when
    it needs those helpers: its other calls never make their closures.
    """
    pieces = _INCLUDE.split(script)  # code, include name, code, include name, ..., code
    codes, names = pieces[0::2], pieces[1::2]
    chunks = {name: _chunks(_read(f"include/{name}.lua")) for name in names}
    marked = "".join(code + (f"\0{i}\0" if i < len(names) else "") for i, code in enumerate(codes))
    # A repeated include -> the span of the function around it.
    spans: dict[int, tuple[int, int]] = {}
    for i, name in enumerate(names):
        if name in names[:i]:
            at = marked.index(f"\0{i}\0")
            start = marked.rindex("\nlocal function ", 0, at) + 1
            spans[i] = (start, marked.index("\nend\n", at) + len("\nend\n"))
    kept: list[set[str]] = [set() for _ in names]
    inlined = [""] * len(names)

    def served(i: int) -> str:
        """The code after place i that its helpers serve, later includes inlined."""
        at = marked.index(f"\0{i}\0")
        code = marked[at : spans[i][1]] if i in spans else marked[at:]
        for j, (start, end) in spans.items():  # another place's function has its own
            if j != i and names[j] == names[i]:
                code = code.replace(marked[start:end], "")
        return re.sub("\0(\\d+)\0", lambda m: inlined[int(m[1])], code)

    # Last place first: what one include uses of another (an earlier one) counts as used.
    for i in reversed(range(len(names))):
        kept[i] = _needed(chunks[names[i]], served(i), unnamed=i not in spans)
        inlined[i] = _text(chunks[names[i]], kept[i], unnamed=i not in spans)
    for i in spans:  # what the first place defines is in scope here
        outer = kept[names.index(names[i])]
        inlined[i] = _text(chunks[names[i]], kept[i] - outer, unnamed=False)
    return re.sub("\0(\\d+)\0", lambda m: inlined[int(m[1])], marked)


def _fields(source: str, name: str, fmt: int) -> str:
    """Return `source` with each `F.<field>` (`O.<field>`) replaced by the field's stored name
    in hash format `fmt` (in the other format), quoted, and `F_FROM_O` by the table of the
    other format's names to `fmt`'s."""
    ours, theirs = NAMES[fmt], NAMES[other(fmt)]

    def stored(match: re.Match[str]) -> str:
        field = (ours if match[1] == "F" else theirs).get(match[2])
        if field is None:
            raise RuntimeError(f"{name}: {match[0]} is not a job field (engine/fields.py)")
        return f"'{field}'"

    renames = ", ".join(f"['{theirs[n]}'] = '{ours[n]}'" for n in ours if theirs[n] != ours[n])
    return _FIELD.sub(stored, source).replace("F_FROM_O", "{" + renames + "}")


def _text(chunks: list[tuple[str | None, str]], names: set[str], unnamed: bool) -> str:
    """Return the include's chunks named in `names` (and the unnamed ones with `unnamed`)."""
    return "".join(text for name, text in chunks if name in names or (unnamed and name is None))


def load_sources(fmt: int = max(FORMATS)) -> dict[str, tuple[int, str]]:
    """Return verb -> (key count, Lua source with includes inlined) for every script file, for
    a Redis whose job hashes are in format `fmt` (engine/seam/hashformat.py)."""
    out: dict[str, tuple[int, str]] = {}
    for entry in (resources.files("engine") / "lua").iterdir():
        match = _NAME.match(entry.name)
        if not match:
            continue
        source = _fields(_expand(_read(entry.name)), entry.name, fmt)
        verb, num_keys = match["verb"], int(match["keys"])
        if len(SCRIPT_KEYS.get(verb, ())) != num_keys:
            raise RuntimeError(
                f"{entry.name}: keys.SCRIPT_KEYS[{verb!r}] must list {num_keys} keys"
            )
        out[verb] = (num_keys, source)
    if set(out) != set(SCRIPT_KEYS):
        raise RuntimeError(f"scripts and SCRIPT_KEYS differ: {sorted(set(out) ^ set(SCRIPT_KEYS))}")
    return out


# Hash format -> verb -> (key count, source), and -> verb -> its SHA1.
_SOURCES = {fmt: load_sources(fmt) for fmt in FORMATS}
_SHAS = {
    fmt: {verb: hashlib.sha1(source.encode()).hexdigest() for verb, (_, source) in by.items()}
    for fmt, by in _SOURCES.items()
}


# The scripts that only read (their header says "Events: none (a read)"): no replica waits for
# them (replica_acks).
READS = frozenset(
    verb for verb, (_, text) in _SOURCES[max(FORMATS)].items() if "Events: none (a read)" in text
)


def _key_names(verb: str, num_keys: int, keys: QueueKeys | Sequence[str]) -> Sequence[str]:
    names = keys.for_script(verb) if isinstance(keys, QueueKeys) else keys
    if len(names) != num_keys:
        raise ValueError(f"{verb} takes {num_keys} keys, got {len(names)}")
    return names


class SyncRunner(Protocol):
    """What run_sync needs of a synchronous client."""

    def execute_command(self, *args: Any) -> Any: ...

    def script_load(self, script: str) -> Any: ...


def run_sync(
    redis: SyncRunner,
    verb: str,
    keys: QueueKeys | Sequence[str],
    args: list[Any],
    fmt: int,
    acks: ReplicaAcks | None = None,
) -> Any:
    """Run script `verb` for hash format `fmt` on a synchronous client (Script.__call__'s twin,
    the same source); with `acks`, a call that writes returns once replicas acknowledged it."""
    num_keys, source = _SOURCES[fmt][verb]
    command = ("EVALSHA", _SHAS[fmt][verb], num_keys, *_key_names(verb, num_keys, keys), *args)
    if acks is not None and verb not in READS:
        sent = acks.commands(command, command[3])
        replies = send_sync(redis, sent.commands, command[3])
        if isinstance(replies[0], NoScriptError):  # nothing ran: load it, send it all again
            redis.script_load(source)
            replies = send_sync(redis, sent.commands, command[3])
        return acks.reply(sent, replies)
    try:
        return redis.execute_command(*command)
    except NoScriptError:  # a server that restarted, flushed its scripts or is new
        redis.script_load(source)
        return redis.execute_command(*command)


@dataclass(frozen=True, slots=True)
class Script:
    """One transition script bound to a client: EVALSHA, loading the source after NOSCRIPT.

    It sends EVALSHA itself, on connections held from the client's pool where it may
    (engine/transport/held.py): redis-py's Script object and its per-command pool checkout
    added layers of wrappers to every call of a one-job enqueue. Its source is the one for the
    hash format of the Redis (engine/seam/hashformat.py), which its set learns on first use.
    """

    verb: str
    num_keys: int
    scripts: ScriptSet

    def _names(self, keys: QueueKeys | Sequence[str]) -> Sequence[str]:
        return _key_names(self.verb, self.num_keys, keys)

    def _format(self) -> int:
        fmt = self.scripts.known
        if fmt is None:
            raise RuntimeError("the hash format is not known yet: await hash_format() first")
        return fmt

    @property
    def source(self) -> str:
        """Return the source for the Redis's hash format (known by now)."""
        return _SOURCES[self._format()][self.verb][1]

    @property
    def sha(self) -> str:
        """Return the SHA1 of `source`."""
        return _SHAS[self._format()][self.verb]

    def queue_in(self, pipe: Pipeline, keys: QueueKeys, args: list[Any]) -> Sent | None:
        """Add a call of the script to `pipe` (its reply is NOSCRIPT if the server lacks it);
        the set must know the hash format already (ScriptSet.hash_format).

        With replica_acks, WAIT (and a fence write: engine/transport/acks.py) follow it:
        return what was added, for `read_queued`; None when the call alone was.
        """
        command = ("EVALSHA", self.sha, self.num_keys, *self._names(keys), *args)
        acks = self.scripts.acks
        if acks is None or self.verb in READS:
            pipe.execute_command(*command)
            return None
        sent = acks.commands(command, command[3])
        for one in sent.commands:
            pipe.execute_command(*one)
        return sent

    def read_queued(self, sent: Sent | None, replies: Sequence[Any]) -> Any:
        """Return the reply of a call `queue_in` added, from the replies of what it added (an
        error reply in its place: NOSCRIPT is returned, not raised); ReplicaAckTimeout when
        too few replicas acknowledged it."""
        if sent is None or isinstance(replies[0], NoScriptError):
            return replies[0]
        acks = self.scripts.acks
        assert acks is not None
        url = acks.shown_url
        return acks.reply(sent, [typed(r, url) if isinstance(r, Exception) else r for r in replies])

    async def __call__(self, keys: QueueKeys | Sequence[str], args: list[Any]) -> Any:
        """Run the script with a queue's keys (or an explicit key list) and its ARGV."""
        fmt = self.scripts.known or await self.scripts.hash_format()
        command = ("EVALSHA", _SHAS[fmt][self.verb], self.num_keys, *self._names(keys), *args)
        acks = self.scripts.acks
        if acks is not None and self.verb not in READS:
            return await self._acked(acks, command, fmt)
        try:
            return await self.scripts.run.execute_command(*command)
        except NoScriptError:  # a server that restarted, flushed its scripts or is new
            # the same source: the same sha
            await self.scripts.redis.script_load(_SOURCES[fmt][self.verb][1])
            return await self.scripts.run.execute_command(*command)

    async def _acked(self, acks: ReplicaAcks, command: tuple[Any, ...], fmt: int) -> Any:
        """Run the call and WAIT on one connection; return its reply once acknowledged."""
        key = command[3]  # the first key: the node of a cluster the call goes to
        sent, run, url = acks.commands(command, key), self.scripts.run, acks.shown_url
        replies = await send(run, sent.commands, key, url)
        if isinstance(replies[0], NoScriptError):  # nothing ran: load it, send it all again
            await self.scripts.redis.script_load(_SOURCES[fmt][self.verb][1])
            replies = await send(run, sent.commands, key, url)
        return acks.reply(sent, replies)


class ScriptSet:
    """Every transition script on one Redis client, by verb, bound on first use.

    A request of the Django app makes a client and calls a script or two: the sources are read
    and hashed once a process, not once a client.
    """

    def __init__(self, redis: Redis, prefix: str, acks: ReplicaAcks | None = None) -> None:
        self.redis = redis
        self.prefix = prefix
        self.run = held_runner(redis)  # one set of held connections for all its scripts
        # What a call that writes waits for (EngineSettings.replica_acks); None: nothing.
        self.acks = acks
        # The hash format of the Redis, once asked (hash_format).
        self.known: int | None = None
        self._by_verb: dict[str, Script] = {}

    async def hash_format(self) -> int:
        """Return the hash format of the Redis (engine/seam/hashformat.py), asked once."""
        if self.known is None:
            self.known = await discover_async(self.redis, self.prefix)
        return self.known

    def __getitem__(self, verb: str) -> Script:
        script = self._by_verb.get(verb)
        if script is None:
            script = Script(verb, _SOURCES[max(FORMATS)][verb][0], self)
            self._by_verb[verb] = script
        return script
