"""Re-sealing online: rotation, resumption, concurrent writers, audits and the command."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentflow.checkpoint import (
    Checkpoint,
    CheckpointCodec,
    JsonCodec,
    MemoryCheckpointer,
    MemoryStore,
    RecordKey,
)
from agentflow.checkpoint.envelope import unwrap
from agentflow.checkpoint.sealing import (
    KeyRing,
    RekeyProgress,
    SealedCodec,
    load_keyring,
    new_key,
    rekey,
    rekey_command,
)
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.errors import CheckpointCorrupted, InvalidArgument

KEYS = {"k1": new_key(), "k2": new_key()}
THREADS = [f"t{i:02d}" for i in range(12)]


def ring(current: str, retired: tuple[str, ...] = (), **keys: str) -> KeyRing:
    spec = {"current": current, "keys": keys or KEYS, "retired": list(retired)}
    return KeyRing.from_source(lambda: spec)


ROTATED = ring("k2", retired=("k1",))


def key_of(store: MemoryStore, thread: str, step: int, namespace: str = "") -> str | None:
    payload = store.namespace(namespace).threads[thread][step].encoded.payload
    sealed = unwrap(RecordKey(namespace, thread, step), payload)
    return sealed[3 : 3 + sealed[2]].decode() if sealed[:1] == b"\xaf" else None


def opener(store: MemoryStore, namespace: str | None = None) -> Any:
    return lambda codec: MemoryCheckpointer(store=store, namespace=namespace, codec=codec)


async def filled(codec: CheckpointCodec | None, steps: int = 3) -> MemoryStore:
    store = MemoryStore()
    async with MemoryCheckpointer(store=store, codec=codec) as cp:
        for thread in THREADS:
            for step in range(steps):
                await cp.put(make_checkpoint(thread, step, state={"n": step, "t": thread}))
    return store


async def states(store: MemoryStore, codec: CheckpointCodec) -> dict[tuple[str, int], Any]:
    async with MemoryCheckpointer(store=store, codec=codec) as cp:
        return {(t, c.step): c.state for t in THREADS async for c in cp.history(t)}


async def test_rotation_reseals_every_record_and_the_old_key_can_go() -> None:
    store = await filled(SealedCodec(ring("k1")))
    before = await states(store, SealedCodec(ring("k1")))
    seen: list[RekeyProgress] = []
    report = await rekey(opener(store), ROTATED, progress=seen.append, page_size=5)
    assert (report.threads, report.records, report.resealed, report.skipped) == (12, 36, 36, 0)
    assert report.by_key == {"k1": 36} and report.left == [] and report.unreadable == []
    assert [p.threads for p in seen] == list(range(1, 13))
    assert {key_of(store, t, s) for t in THREADS for s in range(3)} == {"k2"}
    without_k1 = SealedCodec(ring("k2", k2=KEYS["k2"]))
    assert await states(store, without_k1) == before
    again = await rekey(opener(store), ROTATED)
    assert (again.resealed, again.by_key) == (0, {"k2": 36})


async def test_an_interrupted_rekey_resumes_after_the_last_finished_thread() -> None:
    store = await filled(SealedCodec(ring("k1")))
    tokens: list[str] = []

    def stop_after_five(done: RekeyProgress) -> None:
        tokens.append(done.resume)
        if done.threads == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await rekey(opener(store), ROTATED, progress=stop_after_five, page_size=4)
    assert sum(key_of(store, t, 0) == "k2" for t in THREADS) == 5
    report = await rekey(opener(store), ROTATED, resume=tokens[-1], page_size=4)
    assert (report.threads, report.resealed) == (7, 21)
    assert {key_of(store, t, s) for t in THREADS for s in range(3)} == {"k2"}
    for bad in ("nonsense", "e30", ""):
        with pytest.raises(InvalidArgument, match="resume must be a token"):
            await rekey(opener(store), ROTATED, resume=bad)


async def test_a_concurrent_writer_wins_and_a_stale_one_is_reported() -> None:
    store = await filled(SealedCodec(ring("k1")))
    stale_writer = MemoryCheckpointer(store=store, codec=SealedCodec(ring("k1")))
    fresh_writer = MemoryCheckpointer(store=store, codec=SealedCodec(ROTATED))

    class Racing(MemoryCheckpointer):
        async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
            if if_revision is not None and cp.step == 1 and cp.thread in ("t03", "t04"):
                writer = stale_writer if cp.thread == "t03" else fresh_writer
                await writer.put(dataclasses.replace(cp, state={"written": "meanwhile"}))
            return await super().put(cp, if_revision=if_revision)

    report = await rekey(lambda codec: Racing(store=store, codec=codec), ROTATED)
    assert (report.resealed, report.skipped) == (34, 2)
    assert [(r.thread, r.step, r.key_id, r.retired) for r in report.left] == [
        ("t03", 1, "k1", True)
    ]
    assert report.retired_left == report.left and report.left_count == 1
    after = await states(store, SealedCodec(ROTATED))
    assert after["t03", 1] == after["t04", 1] == {"written": "meanwhile"}


async def test_check_only_audits_without_writing() -> None:
    store = await filled(SealedCodec(ring("k1")), steps=2)
    async with MemoryCheckpointer(store=store, codec=SealedCodec(ROTATED)) as cp:
        await cp.put(make_checkpoint("t00", 1))
    payloads = {t: store.namespace("").threads[t][0].encoded.payload for t in THREADS}
    report = await rekey(opener(store), ROTATED, check_only=True)
    assert report.by_key == {"k1": 23, "k2": 1} and report.resealed == 0
    assert report.left_count == 23 and all(r.retired for r in report.left)
    assert {t: store.namespace("").threads[t][0].encoded.payload for t in THREADS} == payloads
    with pytest.raises(InvalidArgument, match="check_only needs a key ring"):
        await rekey(opener(store), None, check_only=True)


async def test_a_plaintext_store_is_moved_to_sealing() -> None:
    store = await filled(None)
    legacy = store.namespace("").threads["t00"][0]
    cp = make_checkpoint("t00", 0, state={"n": 0, "t": "t00"}, ts=legacy.encoded.ts)
    legacy.encoded = dataclasses.replace(
        legacy.encoded, payload=JsonCodec().encode(cp, RecordKey("", "t00", 0))
    )
    before = await states(store, JsonCodec())
    report = await rekey(opener(store), ROTATED)
    assert report.by_key == {None: 36} and report.resealed == 36
    assert await states(store, SealedCodec(ROTATED)) == before


async def test_without_a_key_ring_every_record_is_rewritten_in_the_envelope() -> None:
    store = await filled(None, steps=1)
    for thread in THREADS:
        stored = store.namespace("").threads[thread][0]
        cp = make_checkpoint(thread, 0, state={"n": 0, "t": thread}, ts=stored.encoded.ts)
        legacy = JsonCodec().encode(cp, RecordKey("", thread, 0))
        stored.encoded = dataclasses.replace(stored.encoded, payload=legacy)
    report = await rekey(opener(store), None)
    assert (report.records, report.resealed) == (12, 12)
    assert all(
        store.namespace("").threads[t][0].encoded.payload.startswith(b'[1,"') for t in THREADS
    )


async def test_a_damaged_thread_is_reported_and_the_rest_go_on() -> None:
    store = await filled(SealedCodec(ring("k1")))
    damaged = store.namespace("").threads["t05"][1]
    damaged.encoded = dataclasses.replace(damaged.encoded, payload=b"\xff{")
    report = await rekey(opener(store), ROTATED)
    assert [thread for thread, _ in report.unreadable] == ["t05"]
    assert "thread 't05' step 1" in report.unreadable[0][1]
    assert report.resealed == 34  # t05's step 0 was read before the damage; step 2 was not
    assert key_of(store, "t06", 2) == "k2"


async def test_rekey_runs_online_beside_writers_and_readers(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with SqliteCheckpointer(path, codec=SealedCodec(ring("k1"))) as old:
        for thread in THREADS:
            for step in range(4):
                await old.put(make_checkpoint(thread, step, state={"v": 0}))
    stop = asyncio.Event()
    written: dict[str, int] = {}
    failures: list[Exception] = []

    async def writer(thread: str) -> None:
        async with SqliteCheckpointer(path, codec=SealedCodec(ROTATED)) as cp:
            version = 0
            while not stop.is_set():
                version += 1
                await cp.put(make_checkpoint(thread, 3, state={"v": version}))
                written[thread] = version
                await asyncio.sleep(0)

    async def reader() -> None:
        async with SqliteCheckpointer(path, codec=SealedCodec(ROTATED)) as cp:
            while not stop.is_set():
                for thread in THREADS:
                    try:
                        assert await cp.get(thread) is not None
                    except Exception as exc:
                        failures.append(exc)

    tasks = [asyncio.create_task(writer(t)) for t in THREADS[:3]] + [asyncio.create_task(reader())]
    report = await rekey(lambda codec: SqliteCheckpointer(path, codec=codec), ROTATED)
    stop.set()
    await asyncio.gather(*tasks)
    assert failures == [] and report.unreadable == []
    # Steps 0-2 of every thread and step 3 of the unwritten ones: 45 records no writer touched.
    assert report.resealed >= 45 and report.resealed + report.skipped <= 48
    audit = await rekey(
        lambda codec: SqliteCheckpointer(path, codec=codec), ROTATED, check_only=True
    )
    assert audit.left == [] and set(audit.by_key) == {"k2"}
    async with SqliteCheckpointer(path, codec=SealedCodec(ROTATED)) as cp:
        for thread in THREADS[:3]:
            latest = await cp.get(thread, 3)
            assert latest is not None and latest.state == {"v": written[thread]}


async def test_the_command_resumes_from_its_state_file(tmp_path: Path) -> None:
    store = await filled(SealedCodec(ring("k1")))
    state = tmp_path / "rekey.state"
    puts = 0

    class Crashing(MemoryCheckpointer):
        async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
            nonlocal puts
            puts += 1
            if puts == 20:
                raise ConnectionError("store went away")
            return await super().put(cp, if_revision=if_revision)

    lines: list[str] = []
    with pytest.raises(ConnectionError):
        await rekey_command(
            lambda codec: Crashing(store=store, codec=codec),
            ROTATED,
            state_file=state,
            echo=lines.append,
            interval=0,
        )
    assert state.exists() and lines and lines[-1].startswith("rekey: 6 threads")
    result = await rekey_command(opener(store), ROTATED, state_file=state, interval=0)
    assert result.status == 0 and not state.exists()
    assert result.data["threads"] == 6 and result.data["left_count"] == 0
    assert result.text.startswith("rekey: 6 threads, 18 checkpoints; re-sealed 17")
    assert "left on another key than 'k2': 0" in result.text
    check = await rekey_command(opener(store), ROTATED, check=True)
    assert check.status == 0 and check.data["by_key"] == {"k2": 36}
    for key in KEYS.values():
        assert key not in result.text + check.text + orjson.dumps(result.data).decode()


async def test_the_command_exits_non_zero_while_records_are_left() -> None:
    store = await filled(SealedCodec(ring("k1")), steps=1)
    check = await rekey_command(opener(store), ROTATED, check=True)
    assert check.status == 1 and check.data["left_count"] == 12
    assert "thread 't00' step 0: k1 (retired)" in check.text
    with pytest.raises(InvalidArgument, match="needs sealing keys"):
        await rekey_command(opener(store), None, check=True)


def test_load_keyring_reads_a_file_then_the_environment(tmp_path: Path) -> None:
    spec = orjson.dumps({"current": "k1", "keys": {"k1": KEYS["k1"]}}).decode()
    path = tmp_path / "keys.json"
    path.write_text(spec)
    path.chmod(0o600)
    from_file = load_keyring(path, environ={})
    from_env = load_keyring(environ={"AGENTFLOW_SEALING_KEYS": spec})
    assert from_file is not None and from_env is not None and from_env.current == "k1"
    assert load_keyring(environ={}) is None
    assert load_keyring(keys_env="OTHER", environ={"OTHER": spec}) is not None


async def test_a_wrong_key_ring_reads_nothing_and_writes_nothing() -> None:
    store = await filled(SealedCodec(ring("k1")), steps=1)
    stranger = ring("x", x=new_key())
    report = await rekey(opener(store), stranger)
    assert report.resealed == 0 and len(report.unreadable) == 12
    assert all("which the key ring does not hold" in m for _, m in report.unreadable)
    with pytest.raises(CheckpointCorrupted):
        await states(store, SealedCodec(stranger))


async def test_the_state_file_is_its_owners_counts_on_and_is_saved_when_cut_short(
    tmp_path: Path,
) -> None:
    store = await filled(SealedCodec(ring("k1")))
    state = tmp_path / "rekey.state"
    seen: list[tuple[int, int]] = []

    class Cancelled(MemoryCheckpointer):
        async def put(self, cp: Checkpoint, *, if_revision: int | None = None) -> str:
            if cp.thread == "t05":  # Ctrl-C while the sixth thread is re-sealed
                raise asyncio.CancelledError
            return await super().put(cp, if_revision=if_revision)

    with pytest.raises(asyncio.CancelledError):
        await rekey_command(
            lambda codec: Cancelled(store=store, codec=codec),
            ROTATED,
            state_file=state,
            interval=3600,  # no save on the way: only the one made when it was cut short
        )
    assert state.stat().st_mode & 0o777 == 0o600
    assert state.read_text().split()[1] == "5"  # five threads were finished
    result = await rekey_command(
        opener(store),
        ROTATED,
        state_file=state,
        on_progress=lambda p, before: seen.append((before, p.threads)),
    )
    assert result.status == 0 and not state.exists()
    assert seen == [(5, n) for n in range(1, 8)]  # counts on from the five done before


async def test_a_state_file_others_can_read_is_refused_naming_the_fix(tmp_path: Path) -> None:
    store = await filled(SealedCodec(ring("k1")), steps=1)
    state = tmp_path / "rekey.state"
    state.write_text("token\n")
    state.chmod(0o644)
    with pytest.raises(InvalidArgument, match=r"\(mode 0644\).*chmod 600 .*rekey\.state"):
        await rekey_command(opener(store), ROTATED, state_file=state)
    assert state.read_text() == "token\n"


async def test_a_rekey_says_nothing_of_the_retired_key_it_is_moving_records_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = await filled(SealedCodec(ring("k1")), steps=1)
    with caplog.at_level("WARNING", logger="agentflow.sealing"):
        result = await rekey_command(opener(store), ring("k2", retired=("k1",)))
    assert result.status == 0 and "retired sealing key" not in caplog.text
    reader = ring("k3", retired=("k2",), k2=KEYS["k2"], k3=new_key())
    with caplog.at_level("WARNING", logger="agentflow.sealing"):
        async with MemoryCheckpointer(store=store, codec=SealedCodec(reader)) as cp:
            await cp.get("t00")
    assert "retired sealing key 'k2'" in caplog.text  # outside a rekey it is said, once
