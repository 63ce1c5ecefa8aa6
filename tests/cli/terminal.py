"""A command on a terminal of its own, driven key by key as a user would.

The command runs in a new session whose controlling terminal is a
pseudo-terminal, so what is typed goes through the terminal's line
discipline: Ctrl-C (``\\x03``) is a SIGINT to the command, Ctrl-D (``\\x04``)
at the start of a line ends its input.
"""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

from tests.cli.support import command, env

CTRL_C = b"\x03"
CTRL_D = b"\x04"
#: The terminal's styles and cursor moves, left out of what a test reads.
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _control_the_terminal() -> None:
    """In the child, after ``setsid``: make stdin (the terminal) the controlling one."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """``agentflow ARGS`` with stdin, stdout and stderr on one pseudo-terminal."""

    def __init__(self, cwd: Path, *args: str, columns: int = 120, **extra: str) -> None:
        self._controller, terminal = pty.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        variables = env(**extra)
        del variables["COLUMNS"]
        self.process = subprocess.Popen(
            command(*args),
            cwd=cwd,
            env=variables,
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            start_new_session=True,
            preexec_fn=_control_the_terminal,  # noqa: PLW1509 (no threads in this test process)
        )
        os.close(terminal)
        self.output = ""

    def _read(self, timeout: float) -> bool:
        """Read what is there within ``timeout``; False once the terminal is closed."""
        ready, _, _ = select.select([self._controller], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self._controller, 65536)
        except OSError as exc:  # EIO: the command and its children have gone
            if exc.errno != errno.EIO:
                raise
            return False
        self.output += chunk.decode(errors="replace").replace("\r", "")
        return bool(chunk)

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """Read until ``text`` has been printed; return everything so far."""
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if time.monotonic() > deadline or not self._read(0.1):
                if text in self.output:
                    break
                self.process.kill()
                raise AssertionError(f"{text!r} never came; the terminal shows:\n{self.output}")
        return self.output

    def type(self, keys: bytes) -> None:
        os.write(self._controller, keys)

    def finish(self, timeout: float = 30) -> tuple[int, str]:
        """Wait for the command to end; its exit status and everything it printed."""
        deadline = time.monotonic() + timeout
        while self._read(0.1):
            if time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError(f"the command did not end; it printed:\n{self.output}")
        os.close(self._controller)
        return self.process.wait(timeout=timeout), _ESCAPES.sub("", self.output)
