"""Output a user can paste back, and store text shown inert, on a pipe and a TTY."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agentflow.checkpoint import Checkpoint
from agentflow.checkpoint.sqlite import SqliteCheckpointer
from tests.backends.postgres import DSN, admin_connection
from tests.cli.hostile import COMBINED, HOSTILE, RAW, graph
from tests.cli.support import af, af_here, af_json, af_tty, command, env

LONG = "refund-A-1001-" + "x" * 60
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _lines(text: str) -> list[str]:
    return [line.strip() for line in _ANSI.sub("", text).splitlines()]


def _expected_commands(thread: str) -> list[str]:
    return [
        f"agentflow resume {thread} --value '\"approve\"'",
        f"agentflow resume {thread} --value '\"reject\"'",
    ]


def test_printed_commands_are_one_line_on_a_narrow_pipe(tmp_path: Path) -> None:
    done = af(tmp_path, "demo", "--thread", LONG, "--hold", "0.1", COLUMNS="40")
    lines = _lines(done.stdout)
    assert set(_expected_commands(LONG)) <= set(lines)
    assert f"kill it at any point; it continues with: agentflow resume {LONG}" in lines


def test_printed_commands_are_one_line_on_a_narrow_terminal(tmp_path: Path) -> None:
    status, out = af_tty(tmp_path, "demo", "--thread", LONG, "--hold", "0.1", columns=40)
    assert status == 0, out
    assert set(_expected_commands(LONG)) <= set(_lines(out))


def test_the_more_line_is_a_command_that_continues_the_listing(tmp_path: Path) -> None:
    for name in (f"{LONG}-1", f"{LONG}-2"):
        af(tmp_path, "demo", "--thread", name, "--hold", "0.1")
    status, out = af_tty(tmp_path, "threads", "--limit", "1", columns=40)
    assert status == 0
    more = [line for line in _lines(out) if line.startswith("more: ")]
    assert len(more) == 1
    words = shlex.split(more[0].removeprefix("more: "))
    assert words[:4] == ["agentflow", "threads", "--limit", "1"]
    rest = af(tmp_path, *words[1:], COLUMNS="40")
    assert f"{LONG}-2" in rest.stdout and f"{LONG}-1" not in rest.stdout


def test_threads_never_truncates_ids_or_times(tmp_path: Path) -> None:
    af(tmp_path, "demo", "--thread", LONG, "--hold", "0.1")
    ts = af_json(tmp_path, "threads")["threads"][0]["ts"]
    for out in (af(tmp_path, "threads", COLUMNS="40").stdout, af_tty(tmp_path, "threads")[1]):
        row = next(line for line in _lines(out) if line.startswith(LONG))
        assert row.split() == [LONG, "interrupted", "2", ts, "-"]
        assert "…" not in out


def test_the_state_show_prints_is_json_that_parses_back_at_any_width(tmp_path: Path) -> None:
    af(tmp_path, "demo", "--thread", LONG, "--hold", "0.1")
    state = af_json(tmp_path, "show", LONG)["state"]
    for out in (af(tmp_path, "show", LONG, COLUMNS="40").stdout, af_tty(tmp_path, "show", LONG)[1]):
        text = _ANSI.sub("", out).replace("\r\n", "\n")
        assert json.loads(text[text.index("\n{") + 1 :]) == state


def test_a_store_url_with_a_password_is_printed_as_a_variable_that_runs() -> None:
    asyncio.run(_check_postgres())
    namespace = f"cli-{uuid.uuid4().hex[:8]}"
    url = DSN.replace("postgres@", "postgres:s3cret-pw@", 1)
    cwd = Path.cwd()
    done = af(
        cwd, "--store", url, "--namespace", namespace, "demo", "--thread", "pw", "--hold", "0"
    )
    assert "s3cret-pw" not in done.stdout and "***" not in done.stdout
    printed = [line for line in _lines(done.stdout) if line.startswith("agentflow resume pw")]
    commands = [line for line in _lines(done.stdout) if "--value" in line]
    assert commands[0] == (
        f'agentflow --store "$AGENTFLOW_STORE" --namespace {namespace} '
        "resume pw --value '\"approve\"'"
    )
    assert printed == [] and "set AGENTFLOW_STORE to the URL you passed as --store" in done.stdout
    finished = subprocess.run(
        [
            "bash",
            "-c",
            commands[0].replace("agentflow ", f"{shlex.quote(sys.executable)} -m agentflow ", 1)
            + " --json",
        ],
        env=env(AGENTFLOW_STORE=url),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert finished.returncode == 0, finished.stderr
    assert '"status": "done"' in finished.stdout
    af(cwd, "--store", url, "--namespace", namespace, "delete", "pw")


async def _check_postgres() -> None:
    """Skip locally (fail under CI) when PostgreSQL is not there."""
    conn = await admin_connection()
    await conn.close()


async def _hostile_store(db: Path) -> None:
    async with SqliteCheckpointer(db) as store:
        compiled = graph().compile(store)
        for text in [*HOSTILE, COMBINED]:
            await compiled.run({"question": text}, thread=text)


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    asyncio.run(_hostile_store(tmp_path / ".runs" / "checkpoints.db"))
    monkeypatch.chdir(tmp_path)
    for name in ("AGENTFLOW_STORE", "AGENTFLOW_NAMESPACE", "AGENTFLOW_GRAPHS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


SPEC = ["--graph", "tests.cli.hostile:graph"]
#: Every command that prints store content, on the thread holding every trick.
EVERY_COMMAND = [
    ["threads"],
    ["threads", "--json"],
    ["history", COMBINED],
    ["history", COMBINED, "--json"],
    ["show", COMBINED],
    ["show", COMBINED, "--json"],
    ["diff", COMBINED, "0", "1"],
    [*SPEC, "resume", COMBINED],
    [*SPEC, "fork", COMBINED, "1", "--to", f"{COMBINED}-fork"],
    [*SPEC, "resume", f"{COMBINED}-fork", "--value", '"no"'],
    [*SPEC, "worker", "--once"],
    ["prune", COMBINED, "--before-step", "1"],
    ["delete", COMBINED],
]


def _assert_inert(outputs: list[str]) -> None:
    for out in outputs:
        assert "Traceback" not in out
        for raw in RAW:
            assert raw not in out, (raw, out)
    joined = "\n".join(outputs)
    assert "[bold red]markup[/]" in joined and ":warning: emoji" in joined
    assert "clear\\u001b[2Jscreen" in joined and "bidi\\u202etxt.exe" in joined


def test_hostile_store_text_is_shown_inert_by_every_command(
    hostile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _assert_inert([af_here(capsys, *args)[1] for args in EVERY_COMMAND])


def test_hostile_store_text_is_shown_inert_on_a_terminal(hostile: Path) -> None:
    picked = [EVERY_COMMAND[i] for i in (0, 2, 4, 7, 8)]  # the rich views and prompts
    _assert_inert([af_tty(hostile, *args, columns=80)[1] for args in picked])


def test_a_printed_command_names_a_hostile_thread_exactly(hostile: Path) -> None:
    thread = HOSTILE[0]
    spec = ["--graph", "tests.cli.hostile:graph"]
    done = af(hostile, *spec, "fork", thread, "1", "--to", thread + "!")
    line = next(x for x in _lines(done.stdout) if x.startswith("agentflow"))
    assert "$'clear\\x1b[2Jscreen!'" in line
    words = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, check=True
    ).stdout.split(b"\0")
    assert thread.encode() + b"!" in words


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path: Path) -> None:
    """``agentflow show ... | head``: more output than a pipe holds, so the write
    meets a closed pipe; the command exits 0 and says nothing."""

    async def fill() -> None:
        async with SqliteCheckpointer(tmp_path / ".runs" / "checkpoints.db") as store:
            await store.put(Checkpoint(thread="big", step=0, state={"text": "x" * 300_000}))

    asyncio.run(fill())
    pipeline = f"set -o pipefail; {shlex.join(command('show', 'big', '--json'))} | head -c 10"
    done = subprocess.run(
        ["bash", "-c", pipeline],
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, '{\n  "threa', "")
