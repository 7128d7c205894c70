"""Error fingerprints: which failures are "the same error", for dead-letter triage.

A fingerprint is made of three human parts: the exception type, the message with its variable
bits normalized (quoted strings, UUIDs, hex ids, numbers) and the top application frame (the
innermost frame that is neither the standard library, an installed package nor the engine), as
`module:function`, without a line number so an unrelated edit does not split a group. Its
`hash` is the first 16 hex digits of the SHA-1 of the three parts; errors the Lua scripts make
themselves carry the hash of their type alone (`fingerprint_hash(kind)`, as `redis.sha1hex`
computes it).
"""

from __future__ import annotations

import hashlib
import os
import re
import sysconfig
from dataclasses import dataclass
from types import TracebackType

# How much of a message counts: enough to tell errors apart, bounded for the hash and the UI.
MESSAGE_CHARS = 300
HASH_CHARS = 16

_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\b"
)
_HEX_PREFIXED = re.compile(r"\b0[xX][0-9a-fA-F]+\b")
# A run of 8+ hex digits with at least one digit and one letter (ids, hashes, addresses);
# all-digit runs are numbers, all-letter runs are words ("deadbeef" stays as written).
_HEX_ID = re.compile(r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b")
# A quoted value ('XYZ', "ada@example.com"): quotes not inside a word (an apostrophe is not one).
_QUOTED = re.compile(r"""(?<![\w'"])(['"])[^'"\n]{1,120}\1(?![\w'"])""")
_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """An error's grouping key: its hash and the parts it was made from."""

    hash: str
    exception: str
    message: str
    frame: str

    def as_fields(self) -> dict[str, str]:
        """Return the fields an error record stores it as."""
        return {
            "fingerprint": self.hash,
            "fingerprint_message": self.message,
            "fingerprint_frame": self.frame,
        }


def normalize_message(message: str) -> str:
    """Return `message` with quoted strings, UUIDs, hex ids and numbers replaced by placeholders."""
    text = _QUOTED.sub(lambda m: f"{m.group(1)}<s>{m.group(1)}", message[: MESSAGE_CHARS * 2])
    text = _UUID.sub("<uuid>", text)
    text = _HEX_PREFIXED.sub("<hex>", text)
    text = _HEX_ID.sub("<hex>", text)
    text = _NUMBER.sub("<n>", text)
    return _SPACES.sub(" ", text).strip()[:MESSAGE_CHARS]


def fingerprint_hash(exception: str, message: str = "", frame: str = "") -> str:
    """Return the short stable hash of the three (already normalized) parts."""
    raw = f"{exception}\n{message}\n{frame}".encode("utf-8", "replace")
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest()[:HASH_CHARS]


def _library_dirs() -> tuple[str, ...]:
    """Return the directories whose frames are not application code."""
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the engine package
    return tuple(os.path.join(os.path.abspath(d), "") for d in dirs)


_LIBRARY_DIRS = _library_dirs()
_LIBRARY_MARKS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def is_application_file(filename: str) -> bool:
    """Tell whether a frame's file is application code (not stdlib, packages or the engine)."""
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    if any(mark in path for mark in _LIBRARY_MARKS):
        return False
    return not path.startswith(_LIBRARY_DIRS)


def top_frame(tb: TracebackType | None) -> str:
    """Return `module:function` of the innermost application frame of `tb` ('' if none)."""
    found = ""
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_application_file(code.co_filename):
            module = tb.tb_frame.f_globals.get("__name__", "") or ""
            found = f"{module}:{code.co_qualname}"
        tb = tb.tb_next
    return found


def fingerprint(exception: str, message: str, frame: str = "") -> Fingerprint:
    """Return the fingerprint of an error of type `exception` with `message`, raised at `frame`."""
    normalized = normalize_message(message)
    return Fingerprint(fingerprint_hash(exception, normalized, frame), exception, normalized, frame)


def of_exception(exc: BaseException, exception: str | None = None) -> Fingerprint:
    """Return the fingerprint of a raised exception (its type name unless `exception`)."""
    kind = exception or f"{type(exc).__module__}.{type(exc).__qualname__}"
    return fingerprint(kind, str(exc), top_frame(exc.__traceback__))
