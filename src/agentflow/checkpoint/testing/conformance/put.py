"""put: round trips, revisions and compare-and-set, and what it refuses."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentflow.checkpoint.base import Checkpoint
from agentflow.checkpoint.redaction import DEFAULT_MASK, RedactKeys
from agentflow.checkpoint.testing.conformance._support import fields_of, thread_ids
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.errors import (
    CheckpointConflict,
    CheckpointError,
    CheckpointNotSerializable,
    InvalidArgument,
    InvalidThreadId,
)

__all__ = ["PutConformance"]

#: Fields a put must refuse, each with a value that has the wrong type or form.
BAD_FIELDS: list[tuple[str, Any]] = [
    ("state", ["a", "list"]),
    ("state", None),
    ("state", "text"),
    ("state", {1: "int key"}),
    ("next", "approve"),
    ("next", ("ok", 1)),
    ("next", None),
    ("interrupted", "no"),
    ("interrupted", 1),
    ("ts", "yesterday"),
    ("ts", 1_700_000_000),
    ("ts", "1969-12-31T23:59:59+00:00"),
    ("ts", "0001-01-01T00:00:00+00:00"),
    ("wake_at", "soon"),
    ("wake_at", "1960-01-01T00:00:00Z"),
    ("parent", 5),
    ("interrupt_node", ["n"]),
    ("extra", ["not", "a", "dict"]),
    ("extra", {1: "int key"}),
]


@pytest.mark.asyncio
class PutConformance:
    """What every backend's ``put`` does."""

    async def test_round_trip_keeps_every_field(self, harness: BackendHarness) -> None:
        original = Checkpoint(
            thread="t1",
            step=3,
            state={"messages": [{"role": "user", "text": "hi"}], "n": 1.5, "ok": True},
            next=("a", "b"),
            parent="t1:2",
            ts="2026-01-02T03:04:05.000006+00:00",
            interrupted=True,
            interrupt_node="approve",
            interrupt_payload={"question": "refund?", "amount": 12},
            wake_at="2026-01-02T04:00:00+00:00",
            extra={"k": [1, None]},
        )
        async with harness.open() as cp:
            assert await cp.put(original) == "t1:3"
            got = await cp.get("t1", 3)
        assert got is not None
        assert got == Checkpoint(**{**fields_of(original), "revision": 1})
        assert got.suspend_kind == "timer" and not got.done

    async def test_list_next_reads_back_as_tuple(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0, next=["a", "b"]))
            got = await cp.get("t")
        assert got is not None and got.next == ("a", "b")

    async def test_empty_state_and_defaults(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await cp.put(Checkpoint(thread="t", step=0, state={}))
            got = await cp.get("t")
        assert got is not None and got.state == {} and got.next == () and got.done
        assert got.parent is None and got.interrupt_payload is None and got.extra == {}

    async def test_empty_ts_is_stamped_utc(self, harness: BackendHarness) -> None:
        before = datetime.now(UTC)
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0))
            got = await cp.get("t")
        assert got is not None
        stamped = datetime.fromisoformat(got.ts)
        assert stamped.utcoffset() == timedelta(0)
        assert before <= stamped <= datetime.now(UTC)

    async def test_caller_mutation_after_put_changes_nothing(self, harness: BackendHarness) -> None:
        state: dict[str, Any] = {"items": [1]}
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0, state=state))
            state["items"].append(2)
            got = await cp.get("t")
        assert got is not None and got.state == {"items": [1]}

    async def test_five_megabyte_state(self, harness: BackendHarness) -> None:
        state = {"blob": "x" * (5 * 1024 * 1024), "rows": [{"i": i} for i in range(1_000)]}
        async with harness.open() as cp:
            await cp.put(make_checkpoint("big", 0, state=state))
            got = await cp.get("big")
        assert got is not None and got.state == state

    # -- revisions and compare-and-set ------------------------------------

    async def test_unconditional_put_bumps_revision(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for expected in (1, 2, 3):
                await cp.put(make_checkpoint("t", 0, state={"n": expected}))
                got = await cp.get("t", 0)
                assert got is not None and got.revision == expected
                assert got.state == {"n": expected}

    async def test_cas_on_absent_step_with_zero_succeeds(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0), if_revision=0)
            got = await cp.get("t", 0)
        assert got is not None and got.revision == 1

    async def test_stale_cas_raises_with_both_revisions(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0, state={"v": "first"}))
            await cp.put(make_checkpoint("t", 0, state={"v": "second"}), if_revision=1)
            with pytest.raises(CheckpointConflict) as info:
                await cp.put(make_checkpoint("t", 0, state={"v": "stale"}), if_revision=1)
            err = info.value
            assert (err.thread, err.step, err.expected, err.actual) == ("t", 0, 1, 2)
            assert "1" in str(err) and "2" in str(err) and err.code == "checkpoint_conflict"
            with pytest.raises(CheckpointConflict) as absent:
                await cp.put(make_checkpoint("t", 5), if_revision=3)
            assert absent.value.actual == 0
            with pytest.raises(CheckpointConflict):
                await cp.put(make_checkpoint("t", 0), if_revision=0)
            got = await cp.get("t", 0)
            assert got is not None and got.state == {"v": "second"} and got.revision == 2
            assert await cp.get("t", 5) is None

    async def test_sixteen_tasks_race_one_step(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("race", 0))
            for _ in range(5):
                current = await cp.get("race", 0)
                assert current is not None
                results = await asyncio.gather(
                    *(
                        cp.put(
                            make_checkpoint("race", 0, state={"w": i}), if_revision=current.revision
                        )
                        for i in range(16)
                    ),
                    return_exceptions=True,
                )
                winners = [r for r in results if isinstance(r, str)]
                losers = [r for r in results if isinstance(r, CheckpointConflict)]
                assert len(winners) == 1 and len(losers) == 15, results
                assert all(e.actual == current.revision + 1 for e in losers)
            final = await cp.get("race", 0)
        assert final is not None and final.revision == 6

    @pytest.mark.parametrize("if_revision", [-1, "1", True, 1.0, 2**63], ids=repr)
    async def test_bad_if_revision_is_invalid_argument(
        self, harness: BackendHarness, if_revision: Any
    ) -> None:
        async with harness.open() as cp:
            with pytest.raises(InvalidArgument) as info:
                await cp.put(make_checkpoint("t", 0), if_revision=if_revision)
            assert not isinstance(info.value, CheckpointConflict)
            assert await cp.get("t") is None

    # -- the model is checked before anything is stored --------------------

    async def test_a_non_checkpoint_is_refused(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for thing in ({"thread": "t", "step": 0, "state": {}}, None, "t:0"):
                with pytest.raises(InvalidArgument):
                    await cp.put(thing)  # type: ignore[arg-type]
            assert await cp.list_threads() == []

    @pytest.mark.parametrize(("name", "value"), BAD_FIELDS, ids=lambda v: repr(v)[:40])
    async def test_a_field_of_the_wrong_type_is_refused_and_nothing_stored(
        self, harness: BackendHarness, name: str, value: Any
    ) -> None:
        good = make_checkpoint("t", 0, next=("n",))
        bad = dataclasses.replace(good, **{name: value})
        async with harness.open() as cp:
            with pytest.raises(InvalidArgument) as info:
                await cp.put(bad)
            assert "'t'" in str(info.value)
            assert await cp.get("t") is None
            assert await cp.list_threads() == []
            assert (await cp.list_threads_page()).threads == []

    @pytest.mark.parametrize(
        "bad_state",
        [
            {"obj": object()},
            {"set": {1, 2}},
            {"bytes": b"raw"},
            {"nan": float("nan")},
            {"inf": [float("inf")]},
            {"nested": {1: "int key"}},
            {"big": 2**70},
            {"when": datetime(2026, 1, 1, tzinfo=UTC)},
        ],
        ids=["object", "set", "bytes", "nan", "inf", "int-key", "bigint", "datetime"],
    )
    async def test_non_json_state_raises_and_stores_nothing(
        self, harness: BackendHarness, bad_state: dict[Any, Any]
    ) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("keep", 0, state={"v": 1}))
            for thread in ("keep", "fresh"):
                with pytest.raises(CheckpointNotSerializable) as info:
                    await cp.put(make_checkpoint(thread, 0, state=bad_state))
                assert isinstance(info.value, CheckpointError) and repr(thread) in str(info.value)
            kept = await cp.get("keep")
            assert kept is not None and kept.state == {"v": 1} and kept.revision == 1
            assert await cp.get("fresh") is None
            assert await thread_ids(cp) == ["keep"]

    async def test_non_json_extra_and_payload_are_refused(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            with pytest.raises(CheckpointNotSerializable):
                await cp.put(make_checkpoint("t", 0, extra={"when": object()}))
            with pytest.raises(CheckpointNotSerializable):
                await cp.put(make_checkpoint("t", 0, interrupt_payload={1, 2}))
            assert await cp.get("t") is None

    async def test_invalid_ids_and_steps_are_refused(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for thread in ("", "nul\x00byte", "lone-\ud800-surrogate", 7):
                with pytest.raises(InvalidThreadId):
                    await cp.put(make_checkpoint(thread, 0))  # type: ignore[arg-type]
            for step in (-1, True, 1.5, "1", 2**63):
                with pytest.raises(InvalidArgument):
                    await cp.put(make_checkpoint("t", step))  # type: ignore[arg-type]
            assert await cp.list_threads() == []

    # -- redaction ---------------------------------------------------------

    async def test_redaction_masks_at_any_depth(self, harness: BackendHarness) -> None:
        state = {
            "api_key": "sk-live-1",
            "nested": {"deep": [{"Password": "hunter2", "keep": 1}]},
            "keep": "visible",
        }
        payload: dict[str, Any] = {"creds": {"token": "t0k"}, "note": "ok"}
        extra = {"audit": {"token": "t1k"}}
        async with harness.open(redact=RedactKeys(["api_key", "password", "token"])) as cp:
            await cp.put(
                make_checkpoint(
                    "t", 0, state=state, interrupted=True, interrupt_payload=payload, extra=extra
                )
            )
            got = await cp.get("t")
        assert got is not None
        assert got.state == {
            "api_key": DEFAULT_MASK,
            "nested": {"deep": [{"Password": DEFAULT_MASK, "keep": 1}]},
            "keep": "visible",
        }
        assert got.interrupt_payload == {"creds": {"token": DEFAULT_MASK}, "note": "ok"}
        assert got.extra == {"audit": {"token": DEFAULT_MASK}}
        assert state["api_key"] == "sk-live-1" and payload["creds"]["token"] == "t0k"

    async def test_redaction_keeps_the_runtime_bookkeeping(self, harness: BackendHarness) -> None:
        runtime = {
            "graph": "refund",
            "writes": {"lookup": {"token": "secret", "order": 7}},
            "answers": {"approve": [{"token": "t", "ok": True}]},
        }
        redact = RedactKeys(["graph", "writes", "answers", "token"])
        async with harness.open(redact=redact) as cp:
            await cp.put(make_checkpoint("t", 0, next=("n",), extra={"runtime": runtime}))
            got = await cp.get("t")
        assert got is not None
        assert got.extra["runtime"] == {
            "graph": "refund",
            "writes": {"lookup": {"token": DEFAULT_MASK, "order": 7}},
            "answers": {"approve": [{"token": DEFAULT_MASK, "ok": True}]},
        }

    async def test_state_nested_too_deep_is_a_typed_error(self, harness: BackendHarness) -> None:
        deep: dict[str, Any] = {}
        node = deep
        for _ in range(1_500):
            node["d"] = {}
            node = node["d"]
        for redact in (None, RedactKeys(["secret"])):
            async with harness.open(redact=redact) as cp:
                with pytest.raises(CheckpointNotSerializable):
                    await cp.put(make_checkpoint("deep", 0, state=deep))
                assert await cp.get("deep") is None
