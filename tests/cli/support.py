"""Running the ``agentflow`` command as a subprocess, as a user would."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from agentflow.cli.app import main

ROOT = Path(__file__).resolve().parents[2]


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLOW_")}
    return {**clean, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **extra}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentflow.cli", *args]


def af(
    cwd: Path, *args: str, check: bool = True, timeout: float = 60, **extra: str
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command(*args),
        check=False,
        cwd=cwd,
        env=env(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}: {done.stderr}")
    return done


def console_interrupted(cwd: Path, *args: str) -> tuple[str, str, int]:
    """Start ``agentflow *args`` (a console), wait until it prints its URL, send it
    one SIGINT: (what it printed until serving, what it printed after, its status)."""
    console = subprocess.Popen(
        command(*args), cwd=cwd, env=env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert console.stdout is not None
    shown = ""
    while "http://127.0.0.1:" not in shown:  # serving: its URL is printed
        line = console.stdout.readline()
        assert line, shown
        shown += line
    console.send_signal(signal.SIGINT)
    rest, _ = console.communicate(timeout=20)
    return shown, rest, console.returncode


def af_json(cwd: Path, *args: str, **extra: str) -> Any:
    return json.loads(af(cwd, *args, "--json", check=True, timeout=60, **extra).stdout)


def af_tty(
    cwd: Path, *args: str, columns: int = 40, timeout: float = 60, stdin_tty: bool = False
) -> tuple[int, str]:
    """Run the command with stdout and stderr on a pseudo-terminal ``columns``
    wide; return its status and output. stdin is the terminal too with
    ``stdin_tty`` (then the command may prompt), else empty."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    variables = env()
    del variables["COLUMNS"]
    proc = subprocess.Popen(
        command(*args),
        cwd=cwd,
        env=variables,
        stdin=terminal if stdin_tty else subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError as exc:  # EIO: the terminal's last writer has gone
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            chunks.append(chunk)
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"{args} did not finish in {timeout}s")
    finally:
        os.close(controller)
    return proc.wait(timeout=timeout), b"".join(chunks).decode(errors="replace").replace("\r", "")


def af_here(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run the command in this process (fast; output is a pipe, not a TTY) in
    the current directory; return its exit status and stdout + stderr."""
    try:
        main(list(args))
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    else:
        status = 0
    captured = capsys.readouterr()
    return status, captured.out + captured.err
