"""The class ``dict`` and type hints as checkpoint values: saved, loaded, never run.

Agent Framework stores ``ctx.request_info(data, dict)``'s response type, the
class ``dict`` itself, inside the pending request, and executors keep hints
such as ``dict[str, int]`` in their state. Seed 000 permits "safe built-ins";
a class reference is resolved, never built, so each is permitted wherever the
restricted loader can rebuild it without running any class's code.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from agent_framework_mongodb import (
    CheckpointCodec,
    MongoDBCheckpointStorage,
    MongoDBMappingError,
    MongoDBSerializationError,
    MongoDBTypeNotPermittedError,
)
from agent_framework_mongodb.codec import loads
from tests.agent_framework_mongodb import af_request_workflows as requests
from tests.agent_framework_mongodb.af_request_resume import mongodb_options
from tests.agent_framework_mongodb.conftest import DATABASE, StorageFactory, make_checkpoint
from tests.agent_framework_mongodb.faults import (
    CollectionProxy,
    io_besides_the_refusal,
    refusal_recorded,
)
from tests.agent_framework_mongodb.pickle_ops import EMPTY_TUPLE, call, glob, integer, text, wrap

REPO = Path(__file__).resolve().parents[2]
HINTS = "agent_framework_mongodb.typeforms"
#: name -> a class or hint a checkpoint may hold.
PERMITTED: dict[str, Any] = {
    "dict": dict,
    "list": list,
    "str": str,
    "typing.Any": typing.Any,
    "datetime class": datetime.datetime,
    "dict[str, int]": dict[str, int],
    "str | None": str | None,
    "Optional[int]": typing.Optional[int],  # noqa: UP045 - the typing form itself
    "Union[int, str, None]": typing.Union[int, str, None],  # noqa: UP007
    "tuple[int, ...]": tuple[int, ...],
    "nested": list[dict[str, typing.Any]],
    "union of generics": int | list[str] | None,
}


@pytest.mark.parametrize("name", sorted(PERMITTED))
async def test_classes_and_type_hints_round_trip(make_storage: StorageFactory, name: str) -> None:
    value = PERMITTED[name]
    checkpoint = make_checkpoint(state={"response_type": value, "in": [value, {"k": value}]})
    await make_storage().save(checkpoint)
    loaded = await make_storage().load(checkpoint.checkpoint_id)
    for got in (loaded.state["response_type"], loaded.state["in"][0], loaded.state["in"][1]["k"]):
        assert got == value and type(got) is type(value)


#: name -> (a value, the error a save refuses it with).
REFUSED: dict[str, tuple[Any, type[Exception]]] = {
    "typing.List[int]": (typing.List[int], MongoDBTypeNotPermittedError),  # noqa: UP006
    "a value as a hint argument": (dict[str, 1], MongoDBSerializationError),  # type: ignore[valid-type]
    "NoneType itself": (type(None), MongoDBMappingError),
    "Ellipsis alone": (Ellipsis, MongoDBTypeNotPermittedError),
    "a generic over an unlisted class": (
        list[requests.UnlistedRequest],
        MongoDBTypeNotPermittedError,
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
async def test_unsupported_hints_are_refused_before_io(
    recording: CollectionProxy, name: str
) -> None:
    value, expected = REFUSED[name]
    storage = MongoDBCheckpointStorage(
        mongodb_options("approval-workflow", "run-1", DATABASE, "unused"),
        collection=recording,
    )
    with pytest.raises(expected):
        await storage.save(make_checkpoint(state={"hint": value}))
    assert io_besides_the_refusal(recording) == [] and refusal_recorded(recording)


def _builder(name: str, *args: bytes) -> bytes:
    return call(glob(HINTS, name), *args)


@pytest.mark.parametrize(
    ("name", "stream"),
    [
        ("builder over numbers", _builder("union", integer(1) + integer(2) + b"\x86")),
        (
            "builder over a function",
            _builder("union", glob("os", "system") + glob("builtins", "str") + b"\x86"),
        ),
        ("one-member union", _builder("union", glob("builtins", "str") + b"\x85")),
        ("generic over a string", _builder("generic_alias", text("dict") + EMPTY_TUPLE)),
        ("unknown builder", _builder("eval", text("1"))),
    ],
)
def test_hostile_hint_streams_fail_closed(name: str, stream: bytes) -> None:
    """A builder is called only with class references, hints and None, and checks
    their shape itself: anything else fails in the serialization category."""
    with pytest.raises(MongoDBSerializationError):
        loads(wrap(stream), CheckpointCodec().policy)


def test_a_hint_and_its_equal_rebuild_hash_alike() -> None:
    codec = CheckpointCodec()
    public = {"hints": [dict[str, int], str | None, typing.Optional[int]]}  # noqa: UP045
    again = codec.decode(codec.encode(public).payload)
    assert codec.encode(again).payload_hash == codec.encode(public).payload_hash


async def test_a_workflow_asking_with_a_plain_dict_resumes_from_latest_in_a_new_process(
    collection: Any, mongo_uri: str
) -> None:
    """Issue 21: ``request_info(data, dict)`` paused, stored, and resumed from
    ``get_latest`` in a fresh interpreter, with the hints of its executor state."""
    options = mongodb_options(requests.DICT_WORKFLOW, "run-dict", DATABASE, collection.name)
    storage = MongoDBCheckpointStorage(options, collection=collection)
    request_id = await requests.pause(requests.dict_workflow(storage), "release?")
    latest = await storage.get_latest(workflow_name=requests.DICT_WORKFLOW)
    assert latest is not None and list(latest.pending_request_info_events) == [request_id]
    argv = ["resume", mongo_uri, DATABASE, collection.name, "run-dict"]
    completed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tests.agent_framework_mongodb.af_request_resume", *argv],
        cwd=REPO,
        env={**os.environ, "PYTHONHASHSEED": "random"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    outcome = json.loads(completed.stdout.strip().splitlines()[-1])
    assert outcome == {"outputs": [requests.EXPECTED], "resumed_from": latest.checkpoint_id}
