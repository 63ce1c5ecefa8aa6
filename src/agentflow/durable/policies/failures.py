"""Which failures of a started call are definitive, and which leave it ambiguous.

The contract allows ``failed`` only for a definitive outcome: an explicit
rejection by the provider or the tool, which proves the call had no effect
(or had its whole effect, reported). A timeout, a cancellation, a lost
connection or an unexpected exception after ``started`` may hide an effect,
so the entry becomes ``ambiguous`` and someone outside the run settles it.
:func:`definitive_failure` is the original's classification, for Python
exceptions:

* an exception that says so itself: ``definitive_outcome = True`` (the
  original's tool metadata flag) is definitive, ``False`` is ambiguous;
* a **model** call whose error names a definitive rejection of the request
  (its text or its string ``code`` contains "context length",
  "context_length_exceeded", "maximum context length", "prompt is too long"
  or "request too large", case-insensitively): the request was refused
  before any completion, so it failed, with code ``model_request_failed``;
* a **tool** exception carrying a string ``error_code`` (the original's
  tool result field): definitive unless the code is one the original treats
  as ambiguous (``tool_timeout``, ``tool_cancelled``, ``tool_connection_lost``,
  ``tool_execution_failed``, ``tool_orchestrator_error``);
* anything else is ambiguous.
"""

from __future__ import annotations

from typing import Final

from agentflow.durable.enums import OperationKind
from agentflow.durable.run.journal import OperationError
from agentflow.durable.wire.validators import is_blank

__all__ = ["AMBIGUOUS_TOOL_ERROR_CODES", "DEFINITIVE_MODEL_MARKERS", "definitive_failure"]

#: Substrings (lowercase) of a model error that prove the provider refused the request.
DEFINITIVE_MODEL_MARKERS: Final = (
    "context length",
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "request too large",
)
#: Tool error codes the original records as ambiguous unless the tool proves otherwise.
AMBIGUOUS_TOOL_ERROR_CODES: Final = frozenset(
    {
        "tool_timeout",
        "tool_cancelled",
        "tool_connection_lost",
        "tool_execution_failed",
        "tool_orchestrator_error",
    }
)


def _string(error: BaseException, name: str) -> str | None:
    value = getattr(error, name, None)
    return value if isinstance(value, str) and not is_blank(value) else None


def _message(error: BaseException, fallback: str) -> str:
    text = str(error)
    return fallback if is_blank(text) else text


def definitive_failure(kind: OperationKind | str, error: BaseException) -> OperationError | None:
    """The typed error to journal as ``failed``, or None: the outcome is unknown (ambiguous).

    ``error`` is what the call raised after its entry was ``started``.
    ``retryable`` comes from a boolean ``retryable`` attribute of the error
    (False without one), as the original reads it from the tool's metadata.
    """
    kind = OperationKind(kind)
    declared = getattr(error, "definitive_outcome", None)
    if declared is False:
        return None
    retryable = getattr(error, "retryable", False) is True
    if kind is OperationKind.MODEL:
        text = f"{error} {_string(error, 'code') or ''}".lower()
        if declared is True or any(marker in text for marker in DEFINITIVE_MODEL_MARKERS):
            return OperationError(
                _string(error, "error_code") or "model_request_failed",
                _message(error, "model request failed"),
                retryable,
            )
        return None
    code = _string(error, "error_code")
    if declared is True or (code is not None and code not in AMBIGUOUS_TOOL_ERROR_CODES):
        return OperationError(
            code or "tool_operation_failed", _message(error, "tool operation failed"), retryable
        )
    return None
