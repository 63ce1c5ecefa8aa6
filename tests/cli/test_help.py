"""The command line explains itself: a version, help for every argument, the decisions."""

from __future__ import annotations

import argparse

import pytest

from agentflow import __version__
from agentflow.cli.parser import DECISION_HELP, build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentflow {__version__}"


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_argument_has_help(name: str) -> None:
    for action in _subcommands()[name]._actions:
        assert action.help, f"{name}: {action.dest} has no help"


def test_reconcile_help_explains_every_decision(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["reconcile", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for decision, text in DECISION_HELP.items():
        assert decision in shown and " ".join(text.split()) in shown


@pytest.mark.parametrize(
    "args",
    [
        ["show", ""],
        ["demo", "--thread", ""],
        ["fork", "t", "1", "--to", ""],
        ["copy", "a", "b", "--thread", ""],
    ],
)
def test_an_empty_thread_id_is_a_usage_error(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(args)
    assert done.value.code == 2
    assert "must not be empty" in capsys.readouterr().err
