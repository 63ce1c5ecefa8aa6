"""The on-disk format of :mod:`agentflow.checkpoint.file`: one file per step.

A step lives in ``<thread dir>/<step:06d>.json``: a small JSON header (format,
revision and a summary of the checkpoint) and then the codec payload, closed
into one JSON document; docs/file.md, "The file format", gives the reasons.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from agentflow.checkpoint import codec
from agentflow.checkpoint.base import Checkpoint
from agentflow.errors import CheckpointCorrupted

__all__ = [
    "header_bytes",
    "read_latest",
    "listdir",
    "load",
    "read_header",
    "step_name",
    "stored_steps",
]

_FORMAT = 1
_PAYLOAD_KEY = b',"payload":'
#: The header is a few hundred bytes; anything longer is not a file we wrote.
_HEADER_MAX = 4096
#: Header fields and their JSON types: format and revision, then a summary of the checkpoint.
_HEADER_TYPES: dict[str, tuple[type, ...]] = {
    "format": (int,),
    "revision": (int,),
    "ts": (str,),
    "ts_us": (int,),
    "interrupted": (bool,),
    "done": (bool,),
    "wake_at": (str, type(None)),
}
_SUMMARY = tuple(_HEADER_TYPES)[2:]

_T = TypeVar("_T")


def step_name(step: int) -> str:
    return f"{step:06d}.json"


def listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []


def stored_steps(directory: str) -> set[int]:
    """The steps stored in ``directory``.

    Deliberately loose (a stray ``1.json`` counts as step 1) and cheap: every
    step is read through its canonical name, so a stray only costs a miss.
    Temp files start with ``.`` and never parse.
    """
    return {int(n[:-5]) for n in listdir(directory) if n.endswith(".json") and n[:-5].isdecimal()}


def read_latest(directory: str, read: Callable[[str, int], _T | None]) -> _T | None:
    """``read(path, step)`` of the highest step whose file still exists.

    A step listed but gone by the time it is read was pruned meanwhile (or
    was a stray name); the next lower one is tried, never the same forever.
    """
    steps = stored_steps(directory)
    while steps:
        step = max(steps)
        found = read(os.path.join(directory, step_name(step)), step)
        if found is not None:
            return found
        steps.discard(step)
    return None


def header_bytes(enc: codec.EncodedCheckpoint, revision: int) -> bytes:
    header = {"format": _FORMAT, "revision": revision}
    header.update((name, getattr(enc, name)) for name in _SUMMARY)
    return orjson.dumps(header)[:-1] + _PAYLOAD_KEY


def _parse_header(data: bytes, path: str) -> tuple[dict[str, Any], int]:
    """Return the header and the offset where the payload starts.

    The first ``,"payload":`` is the structural one: inside a JSON string a
    quote is always escaped, so the sequence cannot occur in a header value.
    """
    end = data.find(_PAYLOAD_KEY, 0, _HEADER_MAX)
    try:
        if end < 0:
            raise ValueError("no envelope header")
        header = orjson.loads(data[:end] + b"}")
        if (
            any(type(header[key]) not in types for key, types in _HEADER_TYPES.items())
            or header["format"] != _FORMAT
            or header["revision"] < 1
        ):
            raise ValueError("envelope header fields have the wrong types")
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointCorrupted(f"checkpoint file {path} is corrupted: {exc}") from exc
    return header, end + len(_PAYLOAD_KEY)


def read_header(path: str) -> dict[str, Any] | None:
    """The header only: revisions, summaries and ages never pay for reading a state."""
    try:
        with open(path, "rb") as f:
            return _parse_header(f.read(_HEADER_MAX), path)[0]
    except FileNotFoundError:
        return None


def load(path: str, thread: str, step: int) -> tuple[Checkpoint, int] | None:
    """The checkpoint and file size, or None if gone; a file that is not exactly
    what :meth:`~agentflow.checkpoint.file.FileCheckpointer._replace` writes for
    this place is corrupted, never missing."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    header, start = _parse_header(data, path)
    if not data.endswith(b"}"):
        raise CheckpointCorrupted(f"checkpoint file {path} is truncated")
    cp = codec.decode(memoryview(data)[start:-1], header["revision"])
    if cp.thread != thread or cp.step != step:
        raise CheckpointCorrupted(
            f"checkpoint file {path} holds thread {cp.thread!r} step {cp.step}, "
            f"not thread {thread!r} step {step}"
        )
    return cp, len(data)
