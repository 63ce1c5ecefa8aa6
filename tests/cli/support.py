"""Running ``python -m agentflow.cli`` as a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENTFLOW_")}
    return {**clean, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentflow.cli", *args]


def af(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command(*args), check=False, cwd=cwd, env=env(), capture_output=True, text=True, timeout=60
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}: {done.stderr}")
    return done


def af_json(cwd: Path, *args: str) -> Any:
    return json.loads(af(cwd, *args, "--json").stdout)
