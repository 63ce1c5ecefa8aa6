"""One Ctrl-C ends any command at once (exit 130) and says what continues it;
Ctrl-D at a prompt is "no answer now". Driven on a real terminal, key by key."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentflow.checkpoint.sqlite import SqliteCheckpointer
from agentflow.checkpoint.testing import make_checkpoint
from agentflow.cli.interrupts import Continuation, PromptInput, answer_or_none
from tests.cli.support import af, af_json, command, console_interrupted, env
from tests.cli.terminal import CTRL_C, CTRL_D, Terminal

QUESTION = "Refund $99.91 to Radia Perlman for order A-1001?"


def _continue_lines(output: str) -> list[str]:
    lines = output.split("\n")
    start = lines.index("continue with:") + 1
    commands = [line.strip() for line in lines[start:] if line.startswith("  agentflow")]
    return [command.split("   #")[0] for command in commands]


def _pasted(cwd: Path, line: str, *more: str) -> subprocess.CompletedProcess[str]:
    """Run a printed ``agentflow ...`` command as pasted into bash."""
    words = line.split("   #", maxsplit=1)[0].replace(
        "agentflow ", f"{shlex.quote(sys.executable)} -m agentflow ", 1
    )
    return subprocess.run(
        ["bash", "-c", " ".join([words, *more])],
        cwd=cwd,
        env=env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_one_ctrl_c_at_the_approval_prompt_ends_the_demo_with_the_commands_that_continue(
    tmp_path: Path,
) -> None:
    demo = Terminal(tmp_path, "demo", "--thread", "t", "--hold", "0")
    demo.wait_for(QUESTION)
    demo.type(CTRL_C)
    status, out = demo.finish(timeout=15)
    assert status == 130, out
    assert "agentflow: interrupted" in out and "Traceback" not in out
    lines = _continue_lines(out)
    assert lines == [
        "agentflow resume t --value '\"approve\"'",
        "agentflow resume t --value '\"reject\"'",
    ]
    finished = _pasted(tmp_path, lines[0], "--json")
    assert finished.returncode == 0 and json.loads(finished.stdout)["status"] == "done"


def test_ctrl_d_at_the_prompt_is_no_answer_now_and_leaves_the_run_paused(tmp_path: Path) -> None:
    demo = Terminal(tmp_path, "demo", "--thread", "t", "--hold", "0")
    demo.wait_for(QUESTION)
    demo.type(CTRL_D)
    status, out = demo.finish(timeout=15)
    assert status == 0 and "EOFError" not in out, out
    assert "no answer now" in out and "paused at request_approval" in out
    assert _continue_lines(out)[0] == "agentflow resume t --value '\"approve\"'"
    assert af_json(tmp_path, "show", "t")["status"] == "interrupted"


def test_ctrl_c_during_a_countdown_names_the_resume_that_waits(tmp_path: Path) -> None:
    demo = Terminal(tmp_path, "demo", "--thread", "t", "--hold", "30", "--approve")
    demo.wait_for("s left")
    demo.type(CTRL_C)
    status, out = demo.finish(timeout=15)
    assert status == 130, out
    assert _continue_lines(out) == [
        "agentflow resume t --wait",
        "agentflow worker",
    ]
    assert af_json(tmp_path, "show", "t")["status"] == "waiting"


async def _threads(path: Path, count: int, steps: int) -> None:
    async with SqliteCheckpointer(path) as store:
        for i in range(count):
            for step in range(steps):
                await store.put(make_checkpoint(f"t{i:04}", step, state={"i": i, "pad": "x" * 200}))


def test_ctrl_c_on_copy_counts_what_was_done_and_the_same_command_goes_on(tmp_path: Path) -> None:
    source = tmp_path / "source.db"
    asyncio.run(_threads(source, 400, 4))
    args = ["copy", f"sqlite:///{source}", "sqlite:///backup.db", "--concurrency", "1"]
    copying = subprocess.Popen(
        command(*args, "--interval", "0.05"),
        cwd=tmp_path,
        env=env(),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert copying.stderr is not None
    progress = copying.stderr.readline()
    assert progress.startswith("copy: ") and " of 400 threads (" in progress and "left" in progress
    copying.send_signal(signal.SIGINT)
    assert copying.wait(timeout=20) == 130
    rest = progress + copying.stderr.read()
    interrupted = next(
        line for line in rest.split("\n") if line.startswith("agentflow: interrupted")
    )
    assert " of 400 threads done: " in interrupted and "copied" in interrupted
    assert _continue_lines(rest) == [shlex.join(["agentflow", *args, "--interval", "0.05"])]
    again = _pasted(tmp_path, _continue_lines(rest)[0])
    assert again.returncode == 0, again.stderr
    assert "threads: 400 (" in again.stdout and "verified: every copied thread" in again.stdout


def test_ctrl_c_on_rekey_saves_its_place_and_counts_on(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text('{"current": "k1", "keys": {"k1": "' + "A" * 43 + '="}}')
    keys.chmod(0o600)
    asyncio.run(_threads(tmp_path / "runs.db", 400, 2))
    args = ["--store", "sqlite:///runs.db", "--keys-file", "keys.json", "rekey"]
    args += ["--state", "rekey.state", "--interval", "0.05"]
    rekeying = subprocess.Popen(
        command(*args), cwd=tmp_path, env=env(), stderr=subprocess.PIPE, text=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    assert rekeying.stderr is not None
    progress = rekeying.stderr.readline()
    assert progress.startswith("rekey: ") and " of 400 threads (" in progress and "left" in progress
    rekeying.send_signal(signal.SIGINT)
    assert rekeying.wait(timeout=20) == 130
    rest = progress + rekeying.stderr.read()
    assert " of 400 threads done" in rest and "starts over" not in rest
    saved = int((tmp_path / "rekey.state").read_text().split()[1])
    assert 0 < saved < 400 and (tmp_path / "rekey.state").stat().st_mode & 0o777 == 0o600
    again = _pasted(tmp_path, _continue_lines(rest)[0])
    assert again.returncode == 0, again.stderr
    counted = [int(line.split()[1].replace(",", "")) for line in again.stderr.split("\n") if line]
    assert counted and min(counted) > saved  # it went on after the threads already re-sealed
    assert not (tmp_path / "rekey.state").exists()
    checked = af(tmp_path, *args[:4], "rekey", "--check", "--json")
    assert json.loads(checked.stdout)["by_key"] == {"k1": 800}


def test_ctrl_c_on_the_console_stops_it_cleanly_with_130(tmp_path: Path) -> None:
    """The console's server shuts down as on its own signal (its lifespan ends):
    no traceback of a server cancelled mid-loop."""
    af(tmp_path, "demo", "--thread", "t", "--hold", "0")
    shown, rest, status = console_interrupted(tmp_path, "ui", "--port", "0")
    assert status == 130, shown + rest
    assert "Traceback" not in rest and "CancelledError" not in rest and "ERROR" not in rest
    assert rest.endswith("agentflow: interrupted\ncontinue with:\n  agentflow ui --port 0\n"), rest


def test_a_ctrl_c_delivered_to_another_thread_still_ends_the_prompt() -> None:
    """The kernel may deliver a terminal's SIGINT to any thread (the SQLite store's
    workers, say); a prompt blocked in ``read`` on the main thread would wait for
    Enter. The prompt's input wakes to let the main thread's handler run: the
    prompt has ended when a line is typed two seconds later."""
    read_end, write_end = os.pipe()
    continuation = Continuation()
    ended = threading.Event()
    ended_before_typing: list[bool] = []
    with os.fdopen(read_end) as stdin, os.fdopen(write_end, "w") as typed:

        def another_thread() -> None:
            time.sleep(0.2)  # the prompt is waiting
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # lands here, not on main
            ended.wait(2)
            ended_before_typing.append(ended.is_set())
            typed.write("approve\n")  # what a prompt still reading would take
            typed.flush()

        sender = threading.Thread(target=another_thread)
        sender.start()
        try:
            with pytest.raises(asyncio.CancelledError):
                answer_or_none(PromptInput(stdin).readline, continuation)
        finally:
            ended.set()
            sender.join()
    assert ended_before_typing == [True]
    assert continuation.interrupted and continuation.presses == 1
