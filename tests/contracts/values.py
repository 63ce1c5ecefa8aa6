"""The small JSON tag language the contract fixture uses to describe Python values.

JSON has no sets, tuples, bytes, big integers or dates, and its objects only
have string keys, so a value that is not a plain JSON scalar or array is a
one-key object naming its type: ``{"set": [...]}``, ``{"int": "-12"}``,
``{"dict": [[key, value], ...]}``. Any implementation can rebuild the same
logical values from it and must reproduce the fixture's hashes.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Callable
from typing import Any

_BUILDERS: dict[str, Callable[[Any], Any]] = {
    "int": int,
    "float": float,
    "bytes": bytes.fromhex,
    "bytearray": bytearray.fromhex,
    "date": datetime.date.fromisoformat,
    "datetime": datetime.datetime.fromisoformat,
    "timedelta": lambda parts: datetime.timedelta(*parts),
    "decimal": decimal.Decimal,
    "uuid": uuid.UUID,
}


def build_value(spec: Any) -> Any:
    """The Python value ``spec`` describes."""
    if isinstance(spec, list):
        return [build_value(item) for item in spec]
    if not isinstance(spec, dict):
        return spec
    ((tag, body),) = spec.items()
    if tag == "tuple":
        return tuple(build_value(item) for item in body)
    if tag == "set":
        return {build_value(item) for item in body}
    if tag == "frozenset":
        return frozenset(build_value(item) for item in body)
    if tag == "dict":
        return {build_value(key): build_value(value) for key, value in body}
    return _BUILDERS[tag](body)
