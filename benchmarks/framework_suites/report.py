"""The tables: per saver or storage, tests passed and failed, and every difference explained.

A difference is a test the stock saver (or the framework's own storage)
passes and ours does not. Each known one has its reason below; any other
makes the command exit non-zero. A test that fails on the stock saver as
well is no difference (it fails on this machine for its own reasons, such as
a newer ``langchain-core`` than the test expects) and is counted, not hidden.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from benchmarks.common import Table
from benchmarks.framework_suites.suites import Run

__all__ = ["differences", "explain", "outcome_table"]

_FILE_LAYOUT: Final = "reads Agent Framework's own file layout (an `<id>.json` file per checkpoint)"
_ONE_NAME: Final = (
    "saves several workflow names in one storage; seed 000 binds a MongoDB storage to one "
    "(MongoDBAuthorizationError)"
)
#: (storage, test function) -> why ours differs from the framework's storage, by design.
EXPLAINED: Final[dict[tuple[str, str], str]] = {
    **{
        (storage, f"test_file_checkpoint_storage_{name}"): _FILE_LAYOUT
        for storage in ("memory", "sqlite", "postgres", "mongodb")
        for name in ("delete", "directory_creation", "json_serialization", "save_and_load")
    },
    **{
        ("mongodb", f"test_{kind}_checkpoint_storage_{name}"): _ONE_NAME
        for kind in ("file", "memory")
        for name in ("get_latest", "list")
    },
}


def _counts(outcomes: dict[str, str]) -> tuple[int, int, int]:
    values = list(outcomes.values())
    return values.count("passed"), values.count("failed"), values.count("skipped")


def outcome_table(title: str, stock: Sequence[Run], ours: Sequence[Run], mode: str) -> Table:
    table = Table(
        title, ["suite", "saver / storage", "mode", "tests", "passed", "failed", "skipped"]
    )
    for run in [*stock, *ours]:
        passed, failed, skipped = _counts(run.counted)
        row = [run.suite, run.saver, mode, len(run.counted), passed, failed, skipped]
        table.rows.append([str(cell) for cell in row])
    return table


def differences(stock: Run, ours: Run) -> list[str]:
    """Test ids ``stock`` passes and ``ours`` does not (or did not run)."""
    mine = ours.counted
    return sorted(
        key for key, out in stock.counted.items() if out == "passed" and mine.get(key) != "passed"
    )


def explain(storage: str, test_ids: Iterable[str]) -> tuple[list[str], list[str]]:
    """(explained lines, unexplained test ids) of one storage's differences."""
    explained, unexplained = [], []
    for test_id in test_ids:
        function = test_id.split("::")[-1].split("[")[0]
        reason = EXPLAINED.get((storage, function))
        if reason is None:
            unexplained.append(test_id)
        else:
            explained.append(f"`{test_id}` ({storage}): {reason}")
    return explained, unexplained
