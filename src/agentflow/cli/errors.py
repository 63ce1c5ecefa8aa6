"""The command line's own errors, and the exit status of every error.

Exit status: 0 done; 1 the command was right but could not be carried out
(no such thread or store, a timer not due, a race lost, a node failed, the
store unreachable, sealing keys unreadable or not installed, records left on
another key); 2 the command line itself is wrong (a flag's value, a store
URL, a ``--graph``, a missing answer), as argparse's own usage errors; 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

from agentflow.errors import AgentflowError, InvalidArgument, InvalidCursor

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "AnswerNeeded",
    "CopyIncomplete",
    "ForeignThread",
    "InvalidGraphSpec",
    "SealingKeysInvalid",
    "SealingUnavailable",
    "ThreadHeld",
    "UsageError",
    "exit_status",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(InvalidArgument):
    """A flag or argument has a value the command cannot use."""

    code = "usage_error"


class InvalidGraphSpec(UsageError):
    """A ``--graph MODULE:ATTR`` (or ``AGENTFLOW_GRAPHS`` entry) gives no usable graph."""

    code = "invalid_graph_spec"


class AnswerNeeded(UsageError):
    """``resume`` of a run that waits for a human, without ``--value``."""

    code = "answer_needed"


class SealingUnavailable(AgentflowError):
    """Sealing keys are given, but the ``sealing`` extra (``cryptography``) is not installed."""

    code = "sealing_unavailable"


class SealingKeysInvalid(AgentflowError):
    """The sealing key spec (``--keys-file`` or ``$AGENTFLOW_SEALING_KEYS``) cannot be
    read or is not a valid key spec."""

    code = "sealing_keys_invalid"


class CopyIncomplete(AgentflowError):
    """``copy`` left threads uncopied (they differ at the destination) or the
    counts read back from the destination do not match."""

    code = "copy_incomplete"


class ForeignThread(AgentflowError):
    """``resume`` or ``fork`` of a thread another framework wrote through its
    agentflow adapter (LangGraph, Agent Framework): that framework continues it."""

    code = "foreign_thread"


class ThreadHeld(AgentflowError):
    """A command would remove a thread while another process holds its live lease."""

    code = "thread_held"


def exit_status(exc: AgentflowError) -> int:
    """The exit status for ``exc``: usage errors 2, everything else 1."""
    return EXIT_USAGE if isinstance(exc, InvalidArgument | InvalidCursor) else EXIT_FAILED
