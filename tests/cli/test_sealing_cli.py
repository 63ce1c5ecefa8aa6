"""Sealed stores on the command line: keys from a file or the environment, every
command opening its stores sealed, and ``agentflow rekey``."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentflow import open_store
from agentflow.checkpoint import Checkpoint
from agentflow.checkpoint.postgres import PostgresCheckpointer
from agentflow.checkpoint.sealing import KeyRing, SealedCodec, new_key
from agentflow.checkpoint.sealing.sealer import is_sealed
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.store import Store
from agentflow.cli.copy import source_threads
from agentflow.cli.keys import SEALED_MARK
from tests.backends.postgres import DSN, admin_connection
from tests.cli.support import af, env
from tests.runtime.graphs import ledger_lines, lost_reply_graph

DB = ".runs/checkpoints.db"


def spec(current: str, keys: dict[str, str], retired: tuple[str, ...] = ()) -> str:
    return json.dumps({"current": current, "keys": keys, "retired": list(retired)})


def ring(text: str) -> KeyRing:
    return KeyRing.from_source(lambda: text)


@pytest.fixture
def keys() -> str:
    return spec("k1", {"k1": new_key()})


def _raw_payloads(db: Path) -> list[bytes]:
    with sqlite3.connect(db) as conn:
        return [bytes(row[0]) for row in conn.execute("SELECT payload FROM agentflow_checkpoints")]


async def _contents(store: Store) -> dict[str, list[Checkpoint]]:
    return {t: [cp async for cp in store.history(t)] async for t in source_threads(store)}


def _read(store: Store) -> dict[str, list[Checkpoint]]:
    async def read() -> dict[str, list[Checkpoint]]:
        async with store:
            return await _contents(store)

    return asyncio.run(read())


def test_the_sealed_mark_is_the_sealing_layers() -> None:
    assert is_sealed(SEALED_MARK + b"rest") and not is_sealed(b"[1," + SEALED_MARK)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_flags(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """``--store``/``--namespace`` flags naming a fresh store of each backend."""
    if request.param == "sqlite":
        yield ["--store", f"sqlite:///{tmp_path / 'sealed.db'}"]
        return
    namespace = f"seal-{uuid.uuid4().hex[:8]}"
    asyncio.run(_postgres_is_up())
    yield ["--store", DSN, "--namespace", namespace]

    async def delete_all() -> None:
        async with PostgresCheckpointer(DSN, namespace=namespace) as store:
            for thread in [t async for t in source_threads(store)]:
                await store.delete_thread(thread)

    asyncio.run(delete_all())


async def _postgres_is_up() -> None:
    conn = await admin_connection()
    await conn.close()


def test_a_sealed_store_is_read_and_written_with_keys_and_refused_clearly_without(
    tmp_path: Path, keys: str, store_flags: list[str]
) -> None:
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(keys)
    keys_file.chmod(0o600)
    af(tmp_path, *store_flags, "demo", "--thread", "t", "--hold", "0", AGENTFLOW_SEALING_KEYS=keys)
    shown = af(tmp_path, *store_flags, "show", "t", "--keys-file", str(keys_file), "--json")
    assert json.loads(shown.stdout)["interrupt_node"] == "request_approval"
    resumed = af(
        tmp_path, *store_flags, "resume", "t", "--value", '"approve"', AGENTFLOW_SEALING_KEYS=keys
    )
    assert "done t at step 7" in resumed.stdout
    history = af(tmp_path, *store_flags, "history", "t", "--json", AGENTFLOW_SEALING_KEYS=keys)
    assert [step["step"] for step in json.loads(history.stdout)] == list(range(8))
    # Every record the CLI wrote (demo and resume alike) is sealed with k1.
    audit = af(tmp_path, *store_flags, "rekey", "--check", "--json", AGENTFLOW_SEALING_KEYS=keys)
    assert json.loads(audit.stdout)["by_key"] == {"k1": 8}
    for command in (["show", "t"], ["history", "t"], ["diff", "t", "1", "2"]):
        refused = af(tmp_path, *store_flags, *command, check=False)
        assert refused.returncode == 1, refused
        assert "is sealed; give the store's sealing keys with --keys-file PATH" in refused.stderr
        assert "Traceback" not in refused.stderr
    as_json = af(tmp_path, *store_flags, "show", "t", "--json", check=False)
    assert json.loads(as_json.stderr)["error"] == "checkpoint_corrupted"
    other = spec("k9", {"k9": new_key()})
    wrong = af(tmp_path, *store_flags, "show", "t", check=False, AGENTFLOW_SEALING_KEYS=other)
    assert wrong.returncode == 1 and "which the key ring does not hold" in wrong.stderr


def test_the_guide_moves_a_plaintext_store_with_paused_runs_to_sealing(
    tmp_path: Path, keys: str, store_flags: list[str]
) -> None:
    """docs/sealing.md "Moving a plaintext store to sealing" with the command line:
    a run paused for a human and one waiting for reconciliation both go on,
    sealed, once ``rekey`` has run (records and events too, not only steps)."""
    ledger = tmp_path / "ledger"
    af(tmp_path, *store_flags, "demo", "--thread", "paused", "--hold", "0")

    async def lost_reply() -> None:
        namespace = store_flags[3] if len(store_flags) > 3 else None
        async with open_store(store_flags[1], namespace=namespace) as store:
            lost = lost_reply_graph().compile(store)
            result = await lost.run({"ledger": str(ledger)}, thread="order-7")
            assert result.status == "reconciliation_required"

    def sealed(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return af(tmp_path, *store_flags, *args, check=check, AGENTFLOW_SEALING_KEYS=keys)

    asyncio.run(lost_reply())
    refused = sealed("show", "paused", check=False)
    assert refused.returncode == 1 and "refuses plaintext" in refused.stderr
    done = json.loads(sealed("rekey", "--json").stdout)
    assert done["durable_records"] == {
        "found": 2, "resealed": 2, "skipped": 0, "by_key": {"plaintext": 2}
    }  # fmt: skip
    assert done["busy"] == [] and done["left_count"] == 0
    audit = json.loads(sealed("rekey", "--check", "--json").stdout)
    assert audit["durable_records"]["by_key"] == {"k1": 2} and set(audit["by_key"]) == {"k1"}
    resumed = sealed("resume", "paused", "--value", '"approve"')
    assert "done paused at step 7" in resumed.stdout
    graph = ["--graph", "tests.runtime.graphs:lost_reply_graph"]
    assert "reconciliation required in order-7" in sealed(*graph, "resume", "order-7").stdout
    journal = json.loads(sealed("journal", "order-7", "--json").stdout)
    assert [call["state"] for call in journal["pending"]] == ["ambiguous"]
    assert len(ledger_lines(ledger)) == 1
    unkeyed = af(tmp_path, *store_flags, "journal", "order-7", check=False)
    assert unkeyed.returncode == 1 and "is sealed; give the store's sealing keys" in unkeyed.stderr


def test_the_stored_records_are_ciphertext(tmp_path: Path, keys: str) -> None:
    af(tmp_path, "demo", "--thread", "t", "--hold", "0", AGENTFLOW_SEALING_KEYS=keys)
    payloads = _raw_payloads(tmp_path / DB)
    assert len(payloads) == 3
    assert all(b"Radia" not in p and b"request_approval" not in p for p in payloads)


def test_a_plaintext_store_is_refused_with_keys(tmp_path: Path, keys: str) -> None:
    af(tmp_path, "demo", "--thread", "t", "--hold", "0")
    refused = af(tmp_path, "show", "t", check=False, AGENTFLOW_SEALING_KEYS=keys)
    assert refused.returncode == 1 and "refuses plaintext" in refused.stderr


def test_copy_opens_both_stores_sealed(tmp_path: Path, keys: str) -> None:
    af(tmp_path, "demo", "--thread", "t", "--hold", "0", AGENTFLOW_SEALING_KEYS=keys)
    backup = tmp_path / "backup.db"
    copied = af(
        tmp_path,
        "copy",
        f"sqlite:///{DB}",
        f"sqlite:///{backup}",
        "--json",
        AGENTFLOW_SEALING_KEYS=keys,
    )
    assert json.loads(copied.stdout)["verified"] is True
    codec = SealedCodec(ring(keys))
    assert _read(SqliteCheckpointer(backup, codec=codec)) == _read(
        SqliteCheckpointer(tmp_path / DB, codec=codec)
    )
    assert all(b"Radia" not in p for p in _raw_payloads(backup))
    unkeyed = af(
        tmp_path, "copy", f"sqlite:///{DB}", f"sqlite:///{tmp_path / 'b2.db'}", check=False
    )
    assert unkeyed.returncode == 1 and "is sealed" in unkeyed.stderr


def _fill(db: Path, keys: str, threads: int, *, offset: int = 0) -> None:
    """``threads`` threads of two steps each, sealed with the current key of ``keys``."""

    async def fill() -> None:
        async with SqliteCheckpointer(db, codec=SealedCodec(ring(keys))) as store:
            for start in range(0, threads, 200):
                await asyncio.gather(
                    *(
                        store.put(Checkpoint(thread=f"t{i:05}", step=step, state={"i": i}))
                        for i in range(offset + start, offset + min(start + 200, threads))
                        for step in (0, 1)
                    )
                )

    asyncio.run(fill())


def _rotated(keys: str) -> str:
    """``keys`` with a new current key and the old one retired."""
    old = json.loads(keys)
    return spec("k2", {**old["keys"], "k2": new_key()}, retired=(old["current"],))


def test_rekey_killed_midway_resumes_from_its_state_file(tmp_path: Path, keys: str) -> None:
    db = tmp_path / "many.db"
    _fill(db, keys, 3_000)
    before = _read(SqliteCheckpointer(db, codec=SealedCodec(ring(keys))))
    new_keys = _rotated(keys)
    state = tmp_path / "rekey.state"
    args = ["--store", f"sqlite:///{db}", "rekey", "--state", str(state), "--interval", "0.05"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentflow.cli", *args],
        cwd=tmp_path,
        env=env(AGENTFLOW_SEALING_KEYS=new_keys),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL, "rekey finished before it could be killed"
    assert proc.stderr is not None and b"rekey: " in proc.stderr.read()
    assert state.read_text().strip()
    midway = json.loads(
        af(
            tmp_path,
            *args[:2],
            "rekey",
            "--check",
            "--json",
            AGENTFLOW_SEALING_KEYS=new_keys,
            check=False,
        ).stdout
    )
    assert 0 < midway["by_key"]["k2"] < 6_000 and midway["left_count"] > 0

    resumed = af(tmp_path, *args, "--json", AGENTFLOW_SEALING_KEYS=new_keys)
    report = json.loads(resumed.stdout)
    assert report["threads"] < 3_000  # went on from the state file, not from the start
    assert report["left_count"] == 0 and not state.exists()
    assert "retired sealing key" not in resumed.stderr  # no "run agentflow rekey" while it runs
    audit = af(tmp_path, *args[:2], "rekey", "--check", "--json", AGENTFLOW_SEALING_KEYS=new_keys)
    assert json.loads(audit.stdout)["by_key"] == {"k2": 6_000}
    only_new = spec("k2", {"k2": json.loads(new_keys)["keys"]["k2"]})
    after = _read(SqliteCheckpointer(db, codec=SealedCodec(ring(only_new))))
    assert after.keys() == before.keys()
    for thread, steps in before.items():
        assert [(c.step, c.state) for c in after[thread]] == [(c.step, c.state) for c in steps]


def test_rekey_check_reports_records_on_retired_keys_and_writes_nothing(
    tmp_path: Path, keys: str
) -> None:
    db = tmp_path / "mixed.db"
    _fill(db, keys, 3)
    new_keys = _rotated(keys)
    _fill(db, new_keys, 2, offset=3)
    stored = _raw_payloads(db)
    flags = ["--store", f"sqlite:///{db}"]
    done = af(tmp_path, *flags, "rekey", "--check", check=False, AGENTFLOW_SEALING_KEYS=new_keys)
    assert done.returncode == 1
    assert "left on another key than 'k2': 6 (6 listed on a retired key)" in done.stdout
    assert "  thread 't00000' step 0: k1 (retired)" in done.stdout
    report = json.loads(
        af(
            tmp_path,
            *flags,
            "rekey",
            "--check",
            "--json",
            check=False,
            AGENTFLOW_SEALING_KEYS=new_keys,
        ).stdout
    )
    assert report["by_key"] == {"k1": 6, "k2": 4}
    assert {(r["thread"], r["step"], r["key"], r["retired"]) for r in report["left"]} == {
        (f"t{i:05}", step, "k1", True) for i in range(3) for step in (0, 1)
    }
    assert _raw_payloads(db) == stored


def test_rekey_plain_moves_pre_envelope_records_into_the_envelope(tmp_path: Path) -> None:
    af(tmp_path, "demo", "--thread", "t", "--hold", "0")
    db = tmp_path / DB
    with sqlite3.connect(db) as conn:  # as an older release stored them: bare JSON
        rows = conn.execute("SELECT thread, step, payload FROM agentflow_checkpoints").fetchall()
        for thread, step, payload in rows:
            bare = json.loads(bytes(payload))[2]
            conn.execute(
                "UPDATE agentflow_checkpoints SET payload = ? WHERE thread = ? AND step = ?",
                (json.dumps(bare, separators=(",", ":")).encode(), thread, step),
            )
    assert all(p.startswith(b'{"v":1,') for p in _raw_payloads(db))
    done = af(tmp_path, "rekey", "--plain")
    assert "rekey: 1 threads, 3 checkpoints; re-written 3" in done.stdout
    assert "durable records: 1; re-written 1, skipped 0, busy 0" in done.stdout
    assert all(p.startswith(b'[1,"') for p in _raw_payloads(db))


def test_rekey_flags_and_key_errors(tmp_path: Path, keys: str) -> None:
    af(tmp_path, "demo", "--thread", "t", "--hold", "0")
    no_keys = af(tmp_path, "rekey", check=False)
    assert no_keys.returncode == 2 and "--plain" in no_keys.stderr
    both = af(tmp_path, "rekey", "--plain", check=False, AGENTFLOW_SEALING_KEYS=keys)
    assert both.returncode == 2 and "takes no sealing keys" in both.stderr
    check_plain = af(tmp_path, "rekey", "--check", "--plain", check=False)
    assert check_plain.returncode == 2
    missing = af(tmp_path, "rekey", "--keys-file", "nowhere.json", "--json", check=False)
    assert missing.returncode == 1
    assert json.loads(missing.stderr)["error"] == "sealing_keys_invalid"
    secret = "c2VjcmV0LXNlY3JldC1zZWNyZXQ="  # base64, but not of 32 bytes
    bad = af(tmp_path, "show", "t", check=False, AGENTFLOW_SEALING_KEYS=spec("k1", {"k1": secret}))
    assert bad.returncode == 1 and "$AGENTFLOW_SEALING_KEYS: key 'k1' must be" in bad.stderr
    assert secret not in bad.stderr and "Traceback" not in bad.stderr
    gone = af(
        tmp_path,
        "--store",
        "sqlite:///nowhere/x.db",
        "rekey",
        check=False,
        AGENTFLOW_SEALING_KEYS=keys,
    )
    assert gone.returncode == 1 and "no store at" in gone.stderr
    assert not (tmp_path / "nowhere").exists()


_WITHOUT_CRYPTOGRAPHY = (
    "import sys; sys.modules['cryptography'] = None; "
    "from agentflow.cli.app import main; main(sys.argv[1:])"
)


def test_without_the_sealing_extra_keys_fail_clearly_and_plain_stores_still_work(
    tmp_path: Path, keys: str
) -> None:
    af(tmp_path, "demo", "--thread", "t", "--hold", "0")

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _WITHOUT_CRYPTOGRAPHY, *args],
            cwd=tmp_path,
            env=env(**extra),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    assert run("show", "t").returncode == 0
    for args in (["show", "t"], ["rekey"], ["rekey", "--check"]):
        done = run(*args, "--json", AGENTFLOW_SEALING_KEYS=keys)
        assert done.returncode == 1, done
        error = json.loads(done.stderr)
        assert error["error"] == "sealing_unavailable"
        assert "pip install 'agentflow-durable[sealing]'" in error["message"]
    plain = run("rekey", "--plain")
    assert plain.returncode == 1 and "pip install 'agentflow-durable[sealing]'" in plain.stderr
