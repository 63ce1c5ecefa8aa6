"""``python -m benchmarks`` without the benchmark extra says what to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Runs the command as a user would, in an environment where aiosqlite (a
# package of the benchmark extra, needed by LangGraph's SQLite saver) is missing.
_WITHOUT_AIOSQLITE = """
import runpy, sys
from importlib.abc import MetaPathFinder

class Missing(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "aiosqlite":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.modules.pop("aiosqlite", None)
sys.meta_path.insert(0, Missing())
sys.argv = ["python -m benchmarks", "sqlite", "--quick"]
runpy.run_module("benchmarks", run_name="__main__", alter_sys=True)
"""


def test_a_missing_contestant_package_names_the_extra_not_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_AIOSQLITE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "benchmark sqlite needs aiosqlite: pip install -e '.[all,benchmark]'"
    )
