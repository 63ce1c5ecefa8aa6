"""No checkpoint refused or lost in silence, and errors Agent Framework understands.

Agent Framework's runner catches a failed save and only logs a warning, so a
run can report "paused" while the latest stored checkpoint predates the
pause. A refused save is logged at ERROR with its category, counted, and
recorded in the run, and ``get_latest`` raises
``MongoDBStaleCheckpointError`` in any process until a later save succeeds.
Every error is a ``WorkflowCheckpointException``; the missing checkpoint
reads as Agent Framework's own.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_framework import WorkflowCheckpointException

import agent_framework_mongodb
from agent_framework_mongodb import (
    MongoDBCheckpointNotFoundError,
    MongoDBCheckpointStorage,
    MongoDBCheckpointStorageError,
    MongoDBStaleCheckpointError,
    MongoDBTypeNotPermittedError,
)
from agent_framework_mongodb.refusals import REFUSED_SAVES, Refusal
from tests.agent_framework_mongodb import af_request_workflows as requests
from tests.agent_framework_mongodb.af_request_resume import mongodb_options
from tests.agent_framework_mongodb.af_workflows import ReviewState
from tests.agent_framework_mongodb.conftest import DATABASE, StorageFactory, make_checkpoint

REPO = Path(__file__).resolve().parents[2]


def test_every_error_is_a_workflow_checkpoint_exception() -> None:
    classes = [
        value
        for value in vars(agent_framework_mongodb).values()
        if inspect.isclass(value) and issubclass(value, Exception)
    ]
    assert len(classes) >= 15
    for cls in classes:
        assert issubclass(cls, WorkflowCheckpointException) and issubclass(
            cls, MongoDBCheckpointStorageError
        ), cls


async def test_a_missing_checkpoint_reads_as_agent_frameworks_own(
    make_storage: StorageFactory,
) -> None:
    with pytest.raises(
        WorkflowCheckpointException, match=r"^No checkpoint found with ID x-1$"
    ) as e:
        await make_storage().load("x-1")
    assert isinstance(e.value, MongoDBCheckpointNotFoundError) and e.value.checkpoint_id == "x-1"


def _latest_in_fresh_process(uri: str, collection: str, session: str) -> dict[str, Any]:
    argv = ["latest", uri, DATABASE, collection, session]
    completed = subprocess.run(
        [sys.executable, "-m", "tests.agent_framework_mongodb.af_request_resume", *argv],
        check=False,
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


async def test_a_refused_save_inside_a_workflow_is_seen_in_every_process(
    collection: Any, mongo_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 21: the request's class is unlisted, so the paused checkpoint is refused;
    Agent Framework reports the run paused anyway. The user finds out: an ERROR line
    with the category, a counter, and get_latest refusing the stale checkpoint here and
    in a fresh process, until a later save of the run succeeds."""
    caplog.set_level(logging.WARNING)
    before = REFUSED_SAVES["type_not_permitted"]
    options = mongodb_options(requests.REFUSED_WORKFLOW, "run-refused", DATABASE, collection.name)
    storage = MongoDBCheckpointStorage(options, collection=collection)
    await requests.pause(requests.refused_workflow(storage), "budget")  # "paused", per AF

    errors = [
        r
        for r in caplog.records
        if r.name == "agent_framework_mongodb" and r.levelno == logging.ERROR
    ]
    assert [r.getMessage().split(":")[0] for r in errors] == [
        "feature=workflow_checkpoint_storage operation=save outcome=refused "
        "category=type_not_permitted"
    ]
    assert REFUSED_SAVES["type_not_permitted"] == before + 1
    with pytest.raises(MongoDBStaleCheckpointError) as stale:
        await storage.get_latest(workflow_name=requests.REFUSED_WORKFLOW)
    assert stale.value.refused_category == "type_not_permitted"
    assert stale.value.latest is None or stale.value.latest.pending_request_info_events == {}
    fresh = await asyncio.to_thread(
        _latest_in_fresh_process, mongo_uri, collection.name, "run-refused"
    )
    assert fresh["error"] == "MongoDBStaleCheckpointError"
    assert fresh["code"] == "mongodb_checkpoint_stale"

    later = make_checkpoint(workflow_name=requests.REFUSED_WORKFLOW, iteration=9)
    await storage.save(later)
    latest = await storage.get_latest(workflow_name=requests.REFUSED_WORKFLOW)
    assert latest is not None and latest.checkpoint_id == later.checkpoint_id


def test_a_refused_write_that_landed_after_all_is_not_stale() -> None:
    """A transient failure leaves the outcome unknown: if the refused ID is on top, it landed."""
    refusal = Refusal("cp-7", "transient_persistence", after_sequence=7)
    assert not refusal.makes_stale({"checkpoint_id": "cp-7", "sequence": 7})
    assert refusal.makes_stale({"checkpoint_id": "cp-6", "sequence": 7})
    assert not refusal.makes_stale({"checkpoint_id": "cp-8", "sequence": 8})
    assert refusal.makes_stale(None)


async def test_a_type_refused_at_load_says_so_in_agent_frameworks_words(
    make_storage: StorageFactory,
) -> None:
    listed = make_storage()  # the suite's scope lists the af_workflows classes
    checkpoint = make_checkpoint(state={"review": ReviewState(notes=["n"])})
    await listed.save(checkpoint)
    with pytest.raises(MongoDBTypeNotPermittedError) as refused:
        await make_storage(allowed_checkpoint_types=()).load(checkpoint.checkpoint_id)
    key = "tests.agent_framework_mongodb.af_workflows:ReviewState"
    assert str(refused.value).startswith(f"Checkpoint deserialization blocked for type '{key}'")
    assert "not permitted" in str(refused.value) and refused.value.type_key == key
    assert isinstance(refused.value, WorkflowCheckpointException)
