"""The on-disk format of the file store: one file per step.

A step lives in ``<thread dir>/<step:06d>.json``: a small JSON header (format,
revision, step and a summary of the checkpoint) and then the codec payload,
closed into one document; docs/file.md, "The file format", gives the reasons.
The payload carries the base's integrity envelope; the header carries its own
checksum (``sum``, XXH3-64 over the header before it), so a flipped revision or
flag is caught too. Files of format 2 (no ``sum``) and 1 (no ``step`` either)
are still read.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import orjson
from xxhash import xxh3_64_hexdigest

from agentflow.checkpoint.backend import EncodedCheckpoint
from agentflow.checkpoint.base import ThreadInfo, ThreadStatus
from agentflow.errors import CheckpointCorrupted

__all__ = ["HEADER_MAX", "Header", "header_bytes", "parse", "payload_of", "step_name", "step_of"]

FORMAT: Final = 3
_PAYLOAD_KEY: Final = b',"payload":'
#: The header is a few hundred bytes; anything longer is not a file we wrote.
HEADER_MAX: Final = 4096
_SUFFIX: Final = ".json"
_SUM_KEY: Final = b',"sum":"'
#: ``,"sum":"`` + 16 hex digits + ``"``.
_SUM_LENGTH: Final = len(_SUM_KEY) + 17


class Header(NamedTuple):
    """What a step file says about itself before its payload."""

    revision: int
    #: None in files of format 1, whose step is only their name.
    step: int | None
    ts: str
    ts_us: int
    interrupted: bool
    done: bool
    wake_at: str | None

    def info(self, thread: str, step: int, run_status: ThreadStatus | None) -> ThreadInfo:
        """The summary of ``thread`` when this is its latest step (and its record
        imposes ``run_status``)."""
        return ThreadInfo(
            thread, step, self.interrupted, self.done, self.ts, self.wake_at, run_status
        )


def step_name(step: int) -> str:
    return f"{step:06d}{_SUFFIX}"


def step_of(name: str) -> int | None:
    """The step a directory entry holds, or None for any other name.

    Deliberately loose (a stray ``1.json`` counts as step 1): every step is
    read through its canonical name, so a stray only costs a miss. Temp files
    start with ``.`` and never parse.
    """
    stem = name[: -len(_SUFFIX)]
    if name.endswith(_SUFFIX) and stem.isdecimal() and stem.isascii():
        return int(stem)
    return None


def header_bytes(enc: EncodedCheckpoint, revision: int) -> bytes:
    """Everything of the file before the payload bytes (the file ends with ``}``)."""
    header = {
        "format": FORMAT,
        "revision": revision,
        "step": enc.step,
        "ts": enc.ts,
        "ts_us": enc.ts_us,
        "interrupted": enc.interrupted,
        "done": enc.done,
        "wake_at": enc.wake_at,
    }
    fields = orjson.dumps(header)[:-1]
    return b'%s%s%s"%s' % (fields, _SUM_KEY, xxh3_64_hexdigest(fields).encode(), _PAYLOAD_KEY)


def _checked(segment: bytes) -> bytes:
    """The header's fields once its ``sum`` matches them (format 3); as is before."""
    if not segment.startswith(b'{"format":3,'):
        return segment
    fields, mark, tail = segment[:-_SUM_LENGTH], segment[-_SUM_LENGTH:-17], segment[-17:]
    if mark != _SUM_KEY or tail[-1:] != b'"' or xxh3_64_hexdigest(fields).encode() != tail[:-1]:
        raise ValueError("the header does not match its checksum")
    return fields


def _header(data: bytes) -> tuple[Header, int]:
    # The first ``,"payload":`` is the structural one: inside a JSON string a
    # quote is always escaped, so the sequence cannot occur in a header value.
    end = data.find(_PAYLOAD_KEY, 0, HEADER_MAX)
    if end < 0:
        raise ValueError("no header")
    fields = orjson.loads(_checked(data[:end]) + b"}")
    if type(fields) is not dict:
        raise ValueError("the header is not an object")
    header = Header._make(map(fields.get, Header._fields))
    form = fields.get("format")
    if "sum" in fields:  # a format 3 header whose format number was damaged
        raise ValueError("the header's format is damaged")
    if not (
        type(header.revision) is int
        and type(header.ts) is str
        and type(header.ts_us) is int
        and type(header.interrupted) is bool
        and type(header.done) is bool
        and (header.wake_at is None or type(header.wake_at) is str)
        and (type(header.step) is int if form in (2, FORMAT) else form == 1 and header.step is None)
    ):
        raise ValueError(f"the fields of a format {form!r} header have the wrong types")
    if header.revision < 1:
        raise ValueError("the revision is damaged")
    return header, end + len(_PAYLOAD_KEY)


def parse(data: bytes, thread: str, step: int | None) -> tuple[Header, int]:
    """The header of a step file and the offset where its payload starts.

    ``step`` is the step the file was read as (None: not known yet); a header
    naming another step is damaged.
    """
    try:
        header, start = _header(data)
        if step is not None and header.step not in (None, step):
            raise ValueError(f"it holds step {header.step}")
    except ValueError as exc:
        where = f"thread {thread!r}" + ("" if step is None else f" step {step}")
        raise CheckpointCorrupted(f"{where}: the checkpoint file is damaged ({exc})") from exc
    return header, start


def payload_of(data: bytes, start: int, thread: str, step: int) -> bytes:
    """The codec's bytes of a whole step file whose payload starts at ``start``."""
    if not data.endswith(b"}"):
        raise CheckpointCorrupted(
            f"thread {thread!r} step {step}: the checkpoint file is truncated"
        )
    return data[start:-1]
