"""canonical_json against the PyPI package ``rfc8785``: identical bytes, and speed.

Every generated document is serialized by both and compared byte for byte
(the run fails on any difference). Documents mix the hard parts of RFC 8785:
number edge cases (signed zero, subnormals, 2**53 boundaries, integral
floats past 2**53, exponent thresholds 1e-7 and 1e21, random bit patterns),
member names whose UTF-16 order differs from their code point order, and
strings full of escapes, controls and astral characters. Speed is measured
in interleaved blocks (ours, theirs, ours, ...) over the same documents, so
machine load moves both contestants alike.
"""

from __future__ import annotations

import math
import random
import statistics
import struct
import time
from collections.abc import Callable
from typing import Any

from agentflow.durable import MAX_WIRE_INTEGER, canonical_json
from benchmarks.common import Table, nested_state

_EDGE_FLOATS = [
    0.0,
    -0.0,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    1e-7,
    9.999999999999999e-8,
    1e-6,
    1e21,
    9.999999999999999e20,
    1e20,
    2.0**53,
    2.0**53 + 2,
    2.0**64,
    0.1,
    1 / 3,
    123456789.123456789,
    -1.5e-300,
]
_EDGE_INTS = [0, 1, -1, MAX_WIRE_INTEGER, -MAX_WIRE_INTEGER, 2**31, -(2**32), 10**15]
_CHARS = [
    *"abcxyzABC019 _-/",
    *["\x00", "\x01", "\x08", "\t", "\n", "\x0b", "\x0c", "\r", "\x1f", '"', "\\", "\x7f"],
    *["é", "ß", "\u0800", "\u2028", "\u2029", "\ud7ff", "\ue000", "\uf8ff", "\ufeff", "\uffff"],
    *["\U00010000", "\U0001f600", "\U0001f9d1", "\U0010ffff", "研", "究"],
]


def _float(rng: random.Random) -> float:
    pick = rng.random()
    if pick < 0.35:
        return rng.choice(_EDGE_FLOATS)
    if pick < 0.7:
        while True:
            value: float = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if math.isfinite(value):
                return value
    if pick < 0.85:
        return float(rng.randint(-(2**60), 2**60))
    return rng.uniform(-1, 1) * 10.0 ** rng.randint(-12, 25)


def _text(rng: random.Random, size: int) -> str:
    return "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, size)))


def _value(rng: random.Random, depth: int) -> Any:
    pick = rng.random()
    if depth > 0 and pick < 0.25:
        return {_text(rng, 6): _value(rng, depth - 1) for _ in range(rng.randint(0, 5))}
    if depth > 0 and pick < 0.4:
        return [_value(rng, depth - 1) for _ in range(rng.randint(0, 5))]
    if pick < 0.6:
        return _float(rng)
    if pick < 0.7:
        return rng.choice(_EDGE_INTS) if rng.random() < 0.5 else rng.randint(-(10**9), 10**9)
    if pick < 0.9:
        return _text(rng, 12)
    return rng.choice([True, False, None])


def documents(count: int, seed: int = 8785) -> list[Any]:
    """``count`` small documents full of RFC 8785 edge cases (deterministic)."""
    rng = random.Random(seed)
    return [{_text(rng, 4): _value(rng, 3) for _ in range(rng.randint(1, 6))} for _ in range(count)]


def _identical(docs: list[Any], reference: Callable[[Any], bytes]) -> int:
    mismatches = 0
    for doc in docs:
        if canonical_json(doc) != reference(doc):
            mismatches += 1
    return mismatches


def _rate(fn: Callable[[Any], bytes], docs: list[Any]) -> float:
    start = time.perf_counter()
    for doc in docs:
        fn(doc)
    return len(docs) / (time.perf_counter() - start)


def _race(docs: list[Any], reference: Callable[[Any], bytes], blocks: int) -> tuple[float, float]:
    ours, theirs = [], []
    for _ in range(blocks):
        ours.append(_rate(canonical_json, docs))
        theirs.append(_rate(reference, docs))
    return statistics.median(ours), statistics.median(theirs)


async def run(quick: bool) -> list[Table]:
    import rfc8785

    reference: Callable[[Any], bytes] = rfc8785.dumps
    count = 5_000 if quick else 100_000
    edge = documents(count)
    mismatches = _identical(edge, reference)
    states = [nested_state(step) for step in range(20 if quick else 200)]
    mismatches += _identical(states, reference)
    if mismatches:
        raise AssertionError(f"{mismatches} documents differ from rfc8785")
    blocks = 3 if quick else 7
    table = Table(
        "canonical_json vs rfc8785 (documents per second, median of interleaved blocks)",
        ["workload", "documents", "canonical_json", "rfc8785", "speed-up"],
    )
    for name, docs in (
        ("edge-case documents (~230 B)", edge[:20_000]),
        ("agent state (~10 KB)", states),
    ):
        ours, theirs = _race(docs, reference, blocks)
        table.rows.append(
            [name, f"{len(docs):,}", f"{ours:,.0f}", f"{theirs:,.0f}", f"{ours / theirs:.1f}x"]
        )
    table.notes.append(
        f"byte-identical on {len(edge) + len(states):,} documents (0 differences); "
        "the run fails on any difference"
    )
    table.notes.append("target: at least 3x faster than rfc8785")
    return [table]
