from __future__ import annotations

import pickle

from agentflow import durable
from agentflow.durable import (
    CheckpointAlreadyExists,
    DurableConflict,
    DurableCorrupted,
    DurableError,
    LeaseLost,
)
from agentflow.errors import AgentflowError, CheckpointCorrupted


def test_codes_and_text_follow_the_original() -> None:
    error = DurableError("checkpoint_key_invalid", "checkpoint key must be non-empty")
    assert isinstance(error, AgentflowError)
    assert error.code == error.error_code() == "checkpoint_key_invalid"
    assert str(error) == "checkpoint_key_invalid: checkpoint key must be non-empty"
    assert DurableError.code == "durable_error"


def test_refusals_are_typed_conflicts() -> None:
    lost = LeaseLost("the claim was replaced")
    assert isinstance(lost, DurableConflict) and lost.code == "checkpoint_lease_lost"
    assert str(CheckpointAlreadyExists("x")) == "checkpoint_already_exists: x"
    corrupted = DurableCorrupted("checkpoint_json_invalid", "bad bytes")
    assert (
        isinstance(corrupted, CheckpointCorrupted) and corrupted.code == "checkpoint_json_invalid"
    )


def test_errors_pickle() -> None:
    for error in (DurableError("a_code", "m"), LeaseLost("m"), DurableCorrupted("c", "m")):
        again = pickle.loads(pickle.dumps(error))
        assert (type(again), again.code, str(again)) == (type(error), error.code, str(error))


def test_everything_public_is_importable() -> None:
    for name in durable.__all__:
        assert getattr(durable, name) is not None
