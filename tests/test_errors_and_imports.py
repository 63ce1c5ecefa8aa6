"""Error codes are stable and the package imports without optional extras."""

from __future__ import annotations

import pickle
import subprocess
import sys

from agentflow import errors


def test_every_error_has_a_distinct_stable_code() -> None:
    classes = [getattr(errors, name) for name in errors.__all__]
    codes = [cls.code for cls in classes]
    assert len(set(codes)) == len(codes)
    assert all(issubclass(cls, errors.AgentflowError) for cls in classes)
    assert errors.StoreUnavailable.retryable and not errors.CheckpointConflict.retryable
    assert errors.StoreClosed.code == "store_closed" and not errors.StoreClosed.retryable
    assert issubclass(errors.InvalidStoreUrl, errors.InvalidArgument)


def test_conflict_names_both_revisions_and_pickles() -> None:
    err = errors.CheckpointConflict("t", 3, expected=1, actual=2)
    assert "expected revision 1" in str(err) and "found revision 2" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert (again.thread, again.step, again.expected, again.actual) == ("t", 3, 1, 2)


def test_import_without_optional_extras() -> None:
    blocked = ["asyncpg", "redis", "pymongo", "agent_framework", "langgraph"]
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "import agentflow, agentflow.checkpoint\n"
        "from agentflow.checkpoint import MemoryCheckpointer, Checkpoint, RedactKeys, open_store\n"
        "import agentflow.checkpoint.sqlite, agentflow.checkpoint.file\n"
        "assert not any(m in sys.modules and sys.modules[m] for m in "
        f"{blocked!r})\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
