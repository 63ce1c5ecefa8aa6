"""The conformance suite: one class of tests that every backend must pass.

A test module subclasses :class:`CheckpointerConformance` and provides an
async ``harness`` fixture yielding a :class:`BackendHarness` on a fresh store.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentflow.checkpoint.base import Checkpoint, Checkpointer
from agentflow.checkpoint.codec import parse_instant
from agentflow.checkpoint.cursor import CURSOR_VERSION, encode_cursor
from agentflow.checkpoint.redaction import DEFAULT_MASK, RedactKeys
from agentflow.checkpoint.testing.harness import BackendHarness, make_checkpoint
from agentflow.errors import (
    CheckpointConflict,
    CheckpointCorrupted,
    CheckpointError,
    CheckpointNotSerializable,
    InvalidArgument,
    InvalidCursor,
    InvalidThreadId,
)

__all__ = ["HOSTILE_THREAD_IDS", "UNICODE_THREAD_IDS", "CheckpointerConformance"]

UNICODE_THREAD_IDS = ["スレッド-🧵", "Ünïcödé", "مرحبا", "emoji-👩‍💻-z", "tab\there", "line\nbreak"]
#: Ids that are syntax somewhere (SQL, glob, LIKE, Mongo query, key patterns).
HOSTILE_THREAD_IDS = [
    "'; DROP TABLE checkpoints; --",
    "*",
    '{"$gt": ""}',
    "%",
    "_",
    "a:b:cp:1",
    "\\",
    "\U0010ffff",
]
#: Ids that a file-system backend refuses by design.
PATH_LIKE_THREAD_IDS = ["..", ".", "a/b", "x" * 300]


async def _history(cp: Checkpointer, thread: str) -> list[Checkpoint]:
    return [c async for c in cp.history(thread)]


@pytest.mark.asyncio
class CheckpointerConformance:
    """Behaviour every :class:`~agentflow.checkpoint.Checkpointer` must show."""

    # -- put / get ---------------------------------------------------------

    async def test_is_a_checkpointer(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            assert isinstance(cp, Checkpointer)

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
        assert got == Checkpoint(**{**_fields(original), "revision": 1})
        assert got.suspend_kind == "timer" and not got.done

    async def test_missing_thread_and_step_read_as_none(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            assert await cp.get("nope") is None
            await cp.put(make_checkpoint("t", 0))
            assert await cp.get("t", 7) is None
            assert await _history(cp, "nope") == []

    async def test_get_latest_is_highest_step(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for step in (2, 0, 10, 1):
                await cp.put(make_checkpoint("t", step))
            latest = await cp.get("t")
        assert latest is not None and latest.step == 10

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

    # -- revisions and compare-and-set ------------------------------------

    async def test_unconditional_put_bumps_revision(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for expected in (1, 2, 3):
                await cp.put(make_checkpoint("t", 0, state={"n": expected}))
                got = await cp.get("t", 0)
                assert got is not None and got.revision == expected
            assert got.state == {"n": 3}

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

    # -- history -----------------------------------------------------------

    async def test_history_ascending_with_revisions(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for step in (3, 1, 2, 0):
                await cp.put(make_checkpoint("t", step))
            await cp.put(make_checkpoint("t", 2))
            await cp.put(make_checkpoint("other", 9))
            got = await _history(cp, "t")
        assert [c.step for c in got] == [0, 1, 2, 3]
        assert [c.revision for c in got] == [1, 1, 2, 1]
        assert all(c.thread == "t" for c in got)

    async def test_long_history_streams_in_bounded_memory(self, harness: BackendHarness) -> None:
        steps, blob = 2_000, "x" * 8_000
        async with harness.open() as cp:
            for start in range(0, steps, 50):
                await asyncio.gather(
                    *(
                        cp.put(make_checkpoint("long", s, state={"s": s, "blob": blob}))
                        for s in range(start, start + 50)
                    )
                )
            tracemalloc.start()
            try:
                seen = 0
                async for c in cp.history("long"):
                    assert c.step == seen and c.state["s"] == seen
                    seen += 1
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert seen == steps
            # 16 MB of payload in all: reading it must not hold half of it at once.
            assert peak < steps * len(blob) * 0.5, f"history held {peak:,} bytes at once"
            first = []
            async for c in cp.history("long"):
                first.append(c.step)
                if len(first) == 3:
                    break
            assert first == [0, 1, 2]

    # -- listing -----------------------------------------------------------

    async def test_list_threads_summaries_in_code_point_order(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as cp:
            assert await cp.list_threads() == []
            await cp.put(make_checkpoint("b", 0, next=("n",)))
            await cp.put(make_checkpoint("b", 1, interrupted=True, next=("n",)))
            await cp.put(make_checkpoint("a", 4))
            await cp.put(
                make_checkpoint(
                    "Z", 0, next=("x",), interrupted=True, wake_at="2030-01-01T00:00:00+00:00"
                )
            )
            await cp.put(make_checkpoint("é", 0, next=("x",)))
            infos = await cp.list_threads()
            assert [i.thread for i in infos] == ["Z", "a", "b", "é"]
            z, a, b, e = infos
            assert (a.latest_step, a.done, a.interrupted) == (4, True, False)
            assert (b.latest_step, b.done, b.interrupted) == (1, False, True)
            assert z.wake_at == "2030-01-01T00:00:00+00:00"
            assert (e.done, e.interrupted) == (False, False)
            assert parse_instant(a.ts) > 0
            assert [i.thread for i in await cp.list_threads(limit=2, offset=1)] == ["a", "b"]
            assert await cp.list_threads(offset=10) == []
            with pytest.raises(InvalidArgument):
                await cp.list_threads(limit=0)
            with pytest.raises(InvalidArgument):
                await cp.list_threads(offset=-1)

    async def test_pages_cover_every_thread_once(self, harness: BackendHarness) -> None:
        names = [f"thread-{i:02d}" for i in range(10)]
        async with harness.open() as cp:
            for name in reversed(names):
                await cp.put(make_checkpoint(name, 0))
            seen: list[str] = []
            cursor: str | None = None
            pages = 0
            while True:
                page = await cp.list_threads_page(limit=3, cursor=cursor)
                pages += 1
                seen.extend(i.thread for i in page.threads)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
            assert seen == names and pages == 4
            exact = await cp.list_threads_page(limit=10)
            assert len(exact.threads) == 10 and exact.next_cursor is None

    async def test_page_cursor_survives_deletion_of_its_thread(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as cp:
            for name in "abcde":
                await cp.put(make_checkpoint(name, 0))
            first = await cp.list_threads_page(limit=2)
            assert first.next_cursor is not None
            await cp.delete_thread("b")
            rest = await cp.list_threads_page(limit=10, cursor=first.next_cursor)
            assert [i.thread for i in rest.threads] == ["c", "d", "e"]

    async def test_bad_cursors_fail_closed(self, harness: BackendHarness) -> None:
        async with harness.open(namespace="tenant-a") as a, harness.open(namespace="tenant-b") as b:
            for name in "abc":
                await a.put(make_checkpoint(name, 0))
                await b.put(make_checkpoint(name, 0))
            cursor = (await a.list_threads_page(limit=1)).next_cursor
            assert cursor is not None
            flipped = cursor[:-3] + ("A" if cursor[-3] != "A" else "B") + cursor[-2:]
            bad = [
                "",
                "not a cursor!",
                flipped,
                cursor[:10],
                encode_cursor("another-backend", "tenant-a", "a"),
                _with_version(cursor, CURSOR_VERSION + 1),
            ]
            for token in bad:
                with pytest.raises(InvalidCursor):
                    await a.list_threads_page(cursor=token)
            with pytest.raises(InvalidCursor):
                await b.list_threads_page(cursor=cursor)
            with pytest.raises(InvalidArgument):
                await a.list_threads_page(limit=0)

    # -- namespaces --------------------------------------------------------

    async def test_namespaces_never_see_each_other(self, harness: BackendHarness) -> None:
        async with (
            harness.open(namespace="acme") as acme,
            harness.open(namespace="globex") as globex,
            harness.open() as default,
        ):
            await acme.put(make_checkpoint("shared", 0, state={"owner": "acme"}))
            await acme.put(make_checkpoint("shared", 1, state={"owner": "acme"}))
            await acme.put(make_checkpoint("only-acme", 0))
            await globex.put(make_checkpoint("shared", 0, state={"owner": "globex"}))
            await default.put(make_checkpoint("dflt", 0))

            got = await globex.get("shared")
            assert got is not None and got.state == {"owner": "globex"} and got.revision == 1
            assert await globex.get("only-acme") is None
            assert [i.thread for i in await acme.list_threads()] == ["only-acme", "shared"]
            assert [i.thread for i in await globex.list_threads()] == ["shared"]
            assert [i.thread for i in (await default.list_threads_page()).threads] == ["dflt"]
            assert [c.step for c in await _history(globex, "shared")] == [0]

            with pytest.raises(CheckpointConflict):
                await globex.put(make_checkpoint("shared", 1), if_revision=1)
            assert await globex.prune("shared", before_step=10) == 1
            await globex.delete_thread("only-acme")
            assert [c.step for c in await _history(acme, "shared")] == [0, 1]
            assert await acme.get("only-acme") is not None
            await acme.delete_thread("shared")
            assert await default.get("dflt") is not None

    async def test_bad_namespace_is_refused(self, harness: BackendHarness) -> None:
        for namespace in ("", "a\x00b", "\udfff"):
            with pytest.raises(InvalidArgument):
                harness.open(namespace=namespace)

    # -- redaction ---------------------------------------------------------

    async def test_redaction_masks_at_any_depth(self, harness: BackendHarness) -> None:
        state = {
            "api_key": "sk-live-1",
            "nested": {"deep": [{"Password": "hunter2", "keep": 1}]},
            "keep": "visible",
        }
        payload: dict[str, Any] = {"creds": {"token": "t0k"}, "note": "ok"}
        async with harness.open(redact=RedactKeys(["api_key", "password", "token"])) as cp:
            await cp.put(
                make_checkpoint("t", 0, state=state, interrupted=True, interrupt_payload=payload)
            )
            got = await cp.get("t")
        assert got is not None
        assert got.state == {
            "api_key": DEFAULT_MASK,
            "nested": {"deep": [{"Password": DEFAULT_MASK, "keep": 1}]},
            "keep": "visible",
        }
        assert got.interrupt_payload == {"creds": {"token": DEFAULT_MASK}, "note": "ok"}
        assert state["api_key"] == "sk-live-1" and payload["creds"]["token"] == "t0k"

    # -- bad input ---------------------------------------------------------

    @pytest.mark.parametrize(
        "bad_state",
        [
            {"obj": object()},
            {"set": {1, 2}},
            {"bytes": b"raw"},
            {"nan": float("nan")},
            {"inf": [float("inf")]},
            {1: "int key"},
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
            assert [i.thread for i in await cp.list_threads()] == ["keep"]

    async def test_invalid_ids_steps_and_timestamps_are_refused(
        self, harness: BackendHarness
    ) -> None:
        async with harness.open() as cp:
            for thread in ("", "nul\x00byte", "lone-\ud800-surrogate"):
                with pytest.raises(InvalidThreadId):
                    await cp.put(make_checkpoint(thread, 0))
                with pytest.raises(InvalidThreadId):
                    await cp.get(thread)
            for step in (-1, True, 1.5):
                with pytest.raises(InvalidArgument):
                    await cp.put(make_checkpoint("t", step))  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument):
                await cp.put(make_checkpoint("t", 0, ts="yesterday"))
            with pytest.raises(InvalidArgument):
                await cp.put(make_checkpoint("t", 0, interrupted=True, wake_at="soon"))
            assert await cp.list_threads() == []

    async def test_corrupted_payload_raises(self, harness: BackendHarness) -> None:
        if harness.corrupt is None:
            pytest.fail(f"harness {harness.name} must provide corrupt()")
        async with harness.open(namespace="n") as cp:
            await cp.put(make_checkpoint("t", 0))
            await cp.put(make_checkpoint("t", 1))
            await harness.corrupt("n", "t", 1)
            with pytest.raises(CheckpointCorrupted):
                await cp.get("t", 1)
            with pytest.raises(CheckpointCorrupted):
                await cp.get("t")
            with pytest.raises(CheckpointCorrupted):
                await _history(cp, "t")
            assert (await cp.get("t", 0)) is not None

    # -- data as data ------------------------------------------------------

    async def test_unicode_and_hostile_ids_are_data(self, harness: BackendHarness) -> None:
        ids = UNICODE_THREAD_IDS + HOSTILE_THREAD_IDS + ["y" * 200]
        if not harness.restricted_thread_ids:
            ids += [*PATH_LIKE_THREAD_IDS, "z" * 5000]
        value = {
            "text": "".join(chr(c) for c in range(1, 0xD800, 97)) + "🧵\U0010ffff",
            "q": {"$gt": ""},
        }
        async with harness.open() as cp:
            for thread in ids:
                await cp.put(make_checkpoint(thread, 0, state=value))
            for thread in ids:
                got = await cp.get(thread)
                assert got is not None and got.thread == thread and got.state == value
                assert [c.thread for c in await _history(cp, thread)] == [thread]
            listed = [i.thread for i in await cp.list_threads(limit=1_000)]
            assert listed == sorted(ids)
            await cp.delete_thread("*")
            assert await cp.get("'; DROP TABLE checkpoints; --") is not None
            assert len(await cp.list_threads(limit=1_000)) == len(ids) - 1

    async def test_path_like_ids_refused_where_restricted(self, harness: BackendHarness) -> None:
        if not harness.restricted_thread_ids:
            return
        async with harness.open() as cp:
            for thread in PATH_LIKE_THREAD_IDS:
                with pytest.raises(InvalidThreadId):
                    await cp.put(make_checkpoint(thread, 0))
            assert await cp.list_threads() == []

    async def test_five_megabyte_state(self, harness: BackendHarness) -> None:
        state = {"blob": "x" * (5 * 1024 * 1024), "rows": [{"i": i} for i in range(1_000)]}
        async with harness.open() as cp:
            await cp.put(make_checkpoint("big", 0, state=state))
            got = await cp.get("big")
        assert got is not None and got.state == state

    # -- prune and delete --------------------------------------------------

    async def test_prune_before_step_is_strict(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for step in range(6):
                await cp.put(make_checkpoint("t", step))
            assert await cp.prune("t", before_step=0) == 0
            assert await cp.prune("t", before_step=3) == 3
            assert [c.step for c in await _history(cp, "t")] == [3, 4, 5]
            assert await cp.prune("missing", before_step=3) == 0
            with pytest.raises(InvalidArgument):
                await cp.prune("t")

    async def test_prune_older_than_compares_instants(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            # 12:00+02:00 is 10:00Z: older than 11:00Z although it sorts later as text.
            await cp.put(make_checkpoint("t", 0, ts="2026-01-01T12:00:00+02:00"))
            await cp.put(make_checkpoint("t", 1, ts="2026-01-01T10:30:00Z"))
            await cp.put(make_checkpoint("t", 2, ts="2026-01-01T11:00:00+00:00"))
            await cp.put(make_checkpoint("t", 3, ts="2026-01-01T13:00:00+01:00"))
            assert await cp.prune("t", older_than="2026-01-01T10:00:00Z") == 0
            assert await cp.prune("t", older_than="2026-01-01T11:00:00Z") == 2
            assert [c.step for c in await _history(cp, "t")] == [2, 3]
            assert await cp.prune("t", older_than="2026-01-01T12:00:01+00:00", before_step=3) == 1
            assert [c.step for c in await _history(cp, "t")] == [3]
            with pytest.raises(InvalidArgument):
                await cp.prune("t", older_than="not a time")

    async def test_prune_updates_listing(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            await cp.put(make_checkpoint("t", 0))
            await cp.put(make_checkpoint("t", 1, interrupted=True, next=("n",)))
            assert await cp.prune("t", before_step=5) == 2
            assert await cp.get("t") is None
            assert await cp.list_threads() == []
            await cp.put(make_checkpoint("u", 0))
            await cp.put(make_checkpoint("u", 1, next=("n",)))
            info = (await cp.list_threads())[0]
            assert (info.latest_step, info.done) == (1, False)

    async def test_delete_thread(self, harness: BackendHarness) -> None:
        async with harness.open() as cp:
            for step in range(3):
                await cp.put(make_checkpoint("gone", step))
            await cp.put(make_checkpoint("stays", 0))
            await cp.delete_thread("gone")
            await cp.delete_thread("gone")
            await cp.delete_thread("never-existed")
            assert await cp.get("gone") is None
            assert await _history(cp, "gone") == []
            assert [i.thread for i in await cp.list_threads()] == ["stays"]
            await cp.put(make_checkpoint("gone", 0), if_revision=0)
            again = await cp.get("gone")
            assert again is not None and again.revision == 1

    async def test_close_is_idempotent(self, harness: BackendHarness) -> None:
        cp = harness.open()
        await cp.put(make_checkpoint("t", 0))
        await cp.close()
        await cp.close()
        async with harness.open() as again:
            assert await again.get("t") is not None


def _fields(cp: Checkpoint) -> dict[str, Any]:
    return {name: getattr(cp, name) for name in Checkpoint.__dataclass_fields__}


def _with_version(cursor: str, version: int) -> str:
    import base64

    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw[0] = version
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
