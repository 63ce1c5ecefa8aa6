"""The suites' report: what counts as a difference, and which are explained by design."""

from __future__ import annotations

from benchmarks.framework_suites.outcomes import Outcomes
from benchmarks.framework_suites.report import differences, explain, outcome_table
from benchmarks.framework_suites.suites import Run


def _run(saver: str, outcomes: dict[str, str], storage_tests: list[str] | None = None) -> Run:
    extra = {} if storage_tests is None else {"storage_tests": storage_tests}
    return Run("suite", saver, Outcomes(outcomes, extra), 0)


def test_a_difference_is_a_test_the_stock_saver_passes_and_ours_does_not() -> None:
    stock = _run("stock", {"a": "passed", "b": "failed", "c": "passed", "d": "passed"})
    ours = _run("sqlite", {"a": "passed", "b": "failed", "c": "failed"})  # d never ran
    assert differences(stock, ours) == ["c", "d"]


def test_only_the_tests_that_create_a_storage_are_counted() -> None:
    run = _run("memory", {"a": "passed", "b": "failed", "c": "failed"}, storage_tests=["a", "b"])
    assert run.counted == {"a": "passed", "b": "failed"}
    table = outcome_table("t", [], [run], "default")
    assert table.rows == [["suite", "memory", "default", "2", "1", "1", "0"]]


def test_differences_by_design_are_explained_and_nothing_else_is() -> None:
    file_layout = "tests/workflow/test_checkpoint.py::test_file_checkpoint_storage_save_and_load"
    several_names = "tests/workflow/test_checkpoint.py::test_memory_checkpoint_storage_list"
    other = "tests/workflow/test_workflow.py::test_resume"
    explained, unexplained = explain("mongodb", [file_layout, several_names, other])
    assert len(explained) == 2 and unexplained == [other]
    assert "file layout" in explained[0] and "several workflow names" in explained[1]
    # The one-name binding is MongoDB's alone: on agentflow's storages it is unexplained.
    assert explain("sqlite", [several_names]) == ([], [several_names])


def test_a_run_that_tested_nothing_is_a_failure_not_a_pass() -> None:
    stopped = Run("langgraph 1.2.24", "postgres", Outcomes(), returncode=4)
    problem = stopped.ran_nothing()
    assert problem is not None and "pytest exited 4 before running any test" in problem
    ran = Run("langgraph 1.2.24", "postgres", Outcomes({"t.py::test_a": "passed"}), returncode=0)
    assert ran.ran_nothing() is None
