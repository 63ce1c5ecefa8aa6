"""The "writing a backend" guide's example passes the conformance suite exactly as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).parents[2] / "docs" / "writing-a-backend.md"


def test_the_guide_example_passes_the_whole_suite(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n# (\S+)\n(.*?)```", GUIDE.read_text(), re.S)
    assert [name for name, _ in blocks] == ["dict_backend.py", "test_dict_backend.py"]
    for name, body in blocks:
        (tmp_path / name).write_text(body)
    # A folder of its own and no project configuration: as a reader would run it.
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_dict_backend.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"\b1\d\d passed\b", result.stdout), result.stdout[-500:]
